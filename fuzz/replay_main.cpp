// main() of the replay builds: runs LLVMFuzzerTestOneInput on every file named on the command
// line, or found (recursively, in sorted order) under a directory named there. This is how
// ctest replays the committed seed corpus, and how a crash file is re-run without libFuzzer:
//     build/release/fuzz/fuzz_kernels_replay build/fuzz-artifacts/crash-...
// A finding aborts the process; the name of the input being run is printed first.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

std::vector<std::uint8_t> read_bytes(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

int main(int argc, char** argv) {
    namespace fs = std::filesystem;
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    std::vector<fs::path> inputs;
    for (int i = 1; i < argc; ++i) {
        const fs::path arg = argv[i];
        if (fs::is_directory(arg)) {
            for (const auto& entry : fs::recursive_directory_iterator(arg)) {
                if (entry.is_regular_file()) inputs.push_back(entry.path());
            }
        } else if (fs::is_regular_file(arg)) {
            inputs.push_back(arg);
        } else {
            std::fprintf(stderr, "%s: no such file or directory\n", arg.string().c_str());
            return 2;
        }
    }
    std::sort(inputs.begin(), inputs.end());
    if (inputs.empty()) {
        std::fprintf(stderr, "no inputs found\n");  // an empty corpus would make the test pass vacuously
        return 2;
    }
    for (const fs::path& input : inputs) {
        std::fprintf(stderr, "replay: %s\n", input.string().c_str());
        const std::vector<std::uint8_t> bytes = read_bytes(input);
        static const std::uint8_t no_bytes = 0;  // a valid pointer for an empty input
        LLVMFuzzerTestOneInput(bytes.empty() ? &no_bytes : bytes.data(), bytes.size());
    }
    std::printf("replayed %zu inputs, no finding\n", inputs.size());
    return 0;
}
