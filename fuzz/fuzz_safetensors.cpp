// fuzz_safetensors: the safetensors reader (io/safetensors.hpp) on arbitrary bytes.
//
// The bytes are the whole file, given to SafetensorsFile::from_bytes (no temporary file).
// Contract checked (docs/math.md §5, docs/safetensors.md):
//  - any input is either accepted or rejected with a FileError; nothing else may escape, and
//    nothing may crash, read out of bounds or allocate more than the file's size calls for;
//  - an accepted file is consistent: its tensors tile the data section exactly, and every tensor
//    reads (read_into, matrix, vector, scalar; float and double) exactly when its rank fits the
//    call, a wrong shape or rank or a missing name being a FileError;
//  - float and double reads agree: F32 / F16 / BF16 convert exactly, F64 rounds to nearest float
//    or is a FileError when out of the float range.
#include "fuzz_support.hpp"

#include "diffattn/io/safetensors.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <set>
#include <string>
#include <vector>

namespace {

using diffattn::FileError;
using diffattn::Index;
using diffattn::SafetensorsDtype;
using diffattn::SafetensorsFile;
using diffattn_fuzz::finding;

/// Runs `call`, which must throw FileError (returns normally or throws anything else: finding).
template <typename Call>
void expect_file_error(const std::string& what, Call&& call) {
    try {
        call();
    } catch (const FileError&) {
        return;
    } catch (const std::exception& e) {
        finding(what, ": expected a FileError, got another exception: ", e.what());
    }
    finding(what, ": expected a FileError, but the call succeeded");
}

/// Runs `call`, which must succeed.
template <typename Call>
void expect_success(const std::string& what, Call&& call) {
    try {
        call();
    } catch (const std::exception& e) {
        finding(what, ": expected success, got: ", e.what());
    }
}

bool same_value(double a, double b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

/// Reads one tensor every way the API offers and checks the results agree.
void exercise_tensor(const SafetensorsFile& file, const std::string& name) {
    const SafetensorsFile::TensorInfo& info = file.info(name);
    const std::string tensor = "tensor " + diffattn::detail::quote_json(name);
    const std::vector<Index>& shape = info.shape;
    const auto count = static_cast<std::size_t>(info.num_elements);

    // Header facts: element count and byte span.
    std::uint64_t product = 1;
    for (const Index dim : shape) product *= static_cast<std::uint64_t>(dim);  // no wrap: checked below
    bool has_zero = false;
    for (const Index dim : shape) has_zero = has_zero || dim == 0;
    if (!has_zero && product != static_cast<std::uint64_t>(info.num_elements)) {
        finding(tensor, ": num_elements ", info.num_elements, " is not the product of its shape");
    }
    if (has_zero && info.num_elements != 0) finding(tensor, ": a zero dimension but ", info.num_elements, " elements");
    if (info.data_end - info.data_begin != count * diffattn::dtype_size(info.dtype)) {
        finding(tensor, ": data_offsets span does not match its shape and dtype");
    }
    if (file.dtype(name) != info.dtype || file.shape(name) != shape) finding(tensor, ": dtype()/shape() disagree with info()");

    // read_into in double always succeeds; in float it fails only for an F64 value beyond float.
    std::vector<double> as_double(count);
    std::vector<float> as_float(count);
    expect_success(tensor + " read_into<double>", [&] { file.read_into<double>(name, shape, as_double.data()); });
    bool float_range_ok = true;
    std::vector<float> expected_float(count);
    for (std::size_t i = 0; i < count; ++i) {
        if (!diffattn::detail::narrow_to_float(as_double[i], expected_float[i])) float_range_ok = false;
    }
    if (float_range_ok) {
        expect_success(tensor + " read_into<float>", [&] { file.read_into<float>(name, shape, as_float.data()); });
        for (std::size_t i = 0; i < count; ++i) {
            if (!same_value(as_float[i], expected_float[i])) {
                finding(tensor, ": element ", i, " reads as ", as_float[i], " in float but ", as_double[i],
                        " in double");
            }
            if (info.dtype != SafetensorsDtype::f64 && !same_value(as_double[i], static_cast<double>(as_float[i]))) {
                finding(tensor, ": element ", i, " of a 16/32-bit dtype is not exact in float");
            }
        }
    } else {
        if (info.dtype != SafetensorsDtype::f64) finding(tensor, ": a non-F64 value outside the float range");
        expect_file_error(tensor + " read_into<float> of an F64 value beyond float",
                          [&] { file.read_into<float>(name, shape, as_float.data()); });
    }

    // A wrong shape (one more dimension) is a FileError, in both types.
    std::vector<Index> wrong_shape = shape;
    wrong_shape.push_back(1);
    std::vector<double> one(1);
    expect_file_error(tensor + " read_into with a wrong shape",
                      [&] { file.read_into<double>(name, wrong_shape, one.data()); });

    // matrix / vector / scalar: exactly the rank that fits succeeds, in both types.
    const auto check_rank_call = [&](const char* call, std::size_t rank, auto&& read_double, auto&& read_float) {
        const std::string what = tensor + " " + call;
        if (shape.size() != rank) {
            expect_file_error(what + "<double> of the wrong rank", read_double);
            expect_file_error(what + "<float> of the wrong rank", read_float);
            return;
        }
        expect_success(what + "<double>", read_double);
        if (float_range_ok) expect_success(what + "<float>", read_float);
    };
    check_rank_call(
        "matrix", 2,
        [&] {
            const diffattn::RowMatrix<double> m = file.matrix<double>(name);
            for (std::size_t i = 0; i < count; ++i) {
                if (!same_value(m.data()[i], as_double[i])) finding(tensor, ": matrix<double> disagrees with read_into");
            }
        },
        [&] { (void)file.matrix<float>(name); });
    check_rank_call(
        "vector", 1,
        [&] {
            const diffattn::Vector<double> v = file.vector<double>(name);
            for (std::size_t i = 0; i < count; ++i) {
                if (!same_value(v[static_cast<Index>(i)], as_double[i])) finding(tensor, ": vector<double> disagrees");
            }
        },
        [&] { (void)file.vector<float>(name); });
    check_rank_call(
        "scalar", 0, [&] { (void)file.scalar<double>(name); }, [&] { (void)file.scalar<float>(name); });

    if (shape.size() == 2) {
        expect_success(tensor + " matrix(rows, cols)", [&] { (void)file.matrix<double>(name, shape[0], shape[1]); });
        if (shape[0] != shape[1]) {
            expect_file_error(tensor + " matrix with rows and cols swapped",
                              [&] { (void)file.matrix<double>(name, shape[1], shape[0]); });
        }
    }
    if (shape.size() == 1) {
        expect_success(tensor + " vector(size)", [&] { (void)file.vector<double>(name, shape[0]); });
    }
}

/// Checks everything an accepted file promises. `data`, `size`: the file.
void exercise(const SafetensorsFile& file, const std::uint8_t* data, std::size_t size) {
    const std::vector<std::string> names = file.names();
    if (names.size() != file.tensor_count() || file.tensors().size() != file.tensor_count()) {
        finding("names(), tensors() and tensor_count() disagree");
    }
    // The tensors tile the data section [8 + header length, size): sorted by offsets, each
    // begins where the previous one ends and the last ends at the end of the file.
    if (size < 8) finding("a ", size, "-byte file was accepted");
    std::uint64_t header_size = 0;
    for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | data[i];
    if (header_size > size - 8) finding("accepted a header length past the end of the file");
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
    for (const auto& entry : file.tensors()) spans.emplace_back(entry.second.data_begin, entry.second.data_end);
    std::sort(spans.begin(), spans.end());
    std::uint64_t cursor = 0;
    for (const auto& span : spans) {
        if (span.first != cursor && span.first != span.second) finding("tensor spans leave a gap or overlap at byte ", cursor);
        if (span.first > cursor || span.second < span.first) finding("bad span [", span.first, ", ", span.second, ")");
        cursor = std::max(cursor, span.second);
    }
    if (cursor != size - 8 - header_size) finding("the tensors end at data byte ", cursor, ", not at the end of file");

    std::set<std::string> all;
    for (const std::string& name : names) {
        if (!file.contains(name)) finding("contains() is false for listed tensor ", name);
        all.insert(name);
        exercise_tensor(file, name);
    }
    expect_success("check_no_unexpected(all names)", [&] { file.check_no_unexpected(all); });
    if (!names.empty()) expect_file_error("check_no_unexpected({})", [&] { file.check_no_unexpected({}); });
    const std::string absent = "\x01 not a tensor of this file";
    if (!file.contains(absent)) {
        expect_file_error("info() of a missing tensor", [&] { (void)file.info(absent); });
        expect_file_error("matrix() of a missing tensor", [&] { (void)file.matrix<float>(absent); });
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::vector<unsigned char> bytes(data, data + size);
    std::optional<SafetensorsFile> file;
    try {
        file.emplace(SafetensorsFile::from_bytes(std::move(bytes), "fuzz input"));
    } catch (const FileError&) {
        return 0;  // a rejected file: the one allowed failure
    } catch (const std::exception& e) {
        finding("SafetensorsFile rejected the file with something other than a FileError: ", e.what());
    }
    try {
        exercise(*file, data, size);
    } catch (const std::exception& e) {
        finding("reading an accepted file threw outside the calls expected to: ", e.what());
    }
    return 0;
}
