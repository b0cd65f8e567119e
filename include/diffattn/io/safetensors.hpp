// Reading and writing safetensors files (SPEC 5), the Hugging Face weight format: the umbrella
// of the io headers, one concept each (docs/safetensors.md).
//
//   safetensors_format.hpp   dtypes, the checked tensor size, the limits (SafetensorsLimits)
//   safetensors_header.hpp   the header checker: JSON header -> validated entries and layout
//   safetensors_reader.hpp   SafetensorsFile: reads a file, hands out converted tensors
//   safetensors_writer.hpp   TensorView and write_safetensors
//   file_kind.hpp            the regular-file check shared by reader and writer
#pragma once

#include "diffattn/io/file_kind.hpp"
#include "diffattn/io/safetensors_format.hpp"
#include "diffattn/io/safetensors_header.hpp"
#include "diffattn/io/safetensors_reader.hpp"
#include "diffattn/io/safetensors_writer.hpp"
