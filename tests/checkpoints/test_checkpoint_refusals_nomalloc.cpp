// Built into test_nomalloc (EIGEN_RUNTIME_NO_MALLOC): a refused checkpoint is refused before the
// model is allocated (docs/checkpoints.md, "Refused"; DecoderModel::load). Every matrix and vector
// of a model is Eigen storage, so loading each directory of tests/data/checkpoints/refused with
// Eigen's heap allocations forbidden must throw without a single forbidden allocation.
// control_valid, which loads, shows that the counter sees the model's allocation.
#include "../no_malloc_guard.hpp"  // first: routes eigen_assert to a counter
#include "diffattn/model/decoder_model.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <vector>

using namespace diffattn;

namespace {

/// Eigen allocations while `load` runs (operator new is not counted: the reader's strings and
/// vectors are not the model); `refused` is set when it throws a diffattn Error.
template <typename F>
int eigen_allocations(F&& load, bool& refused) {
    const int before = diffattn_nomalloc::failures.load();
    refused = false;
    Eigen::internal::set_is_malloc_allowed(false);
    try {
        load();
    } catch (const Error&) {
        refused = true;
    }
    Eigen::internal::set_is_malloc_allowed(true);
    return diffattn_nomalloc::failures.load() - before;
}

}  // namespace

TEST_CASE("a refused checkpoint allocates no model storage", "[checkpoints][refused][nomalloc]") {
    const std::filesystem::path root = std::filesystem::path(DIFFATTN_TEST_DATA_DIR) / "checkpoints" / "refused";
    std::vector<std::filesystem::path> dirs;
    for (const auto& entry : std::filesystem::directory_iterator(root)) {
        if (entry.is_directory()) dirs.push_back(entry.path());
    }
    std::sort(dirs.begin(), dirs.end());
    REQUIRE(dirs.size() == 42);  // 41 refused and control_valid
    for (const std::filesystem::path& dir : dirs) {
        INFO("refused/" << dir.filename().string());
        bool refused = false;
        const int allocations = eigen_allocations([&] { (void)DecoderModel<float>::load(dir); }, refused);
        if (dir.filename() == "control_valid") {
            CHECK_FALSE(refused);
            CHECK(allocations > 0);
        } else {
            CHECK(refused);
            CHECK(allocations == 0);
        }
    }
}
