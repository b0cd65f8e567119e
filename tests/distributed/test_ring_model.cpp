// A decoder model's forward across ranks (include/diffattn/distributed/ring_model.hpp) gives the
// logits of one process, for every attention kind and DINT integral, causal and encoder models.
#include "../model/model_files.hpp"  // small_configs.hpp, and the model instantiated once (test_model_support)

#include "diffattn/distributed/ring_model.hpp"

#include <catch2/catch.hpp>
#include <mpi.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace {

using namespace diffattn;
using namespace diffattn::test;

struct NamedModel {
    std::string name;
    ModelConfig config;
};

std::vector<NamedModel> models() {
    std::vector<NamedModel> list{{"softmax", small_config(AttentionKind::softmax)},
                                 {"diff", small_config(AttentionKind::diff)},
                                 {"shared_diff", small_config(AttentionKind::shared_diff)},
                                 {"diff_v2", small_config(AttentionKind::diff_v2)},
                                 {"gda (each signal head a DIFF head of the ring)", small_config(AttentionKind::gda)},
                                 {"dint causal_softmax", small_config(AttentionKind::dint, DintIntegral::causal_softmax)},
                                 {"dint causal_mean", small_config(AttentionKind::dint, DintIntegral::causal_mean)}};
    ModelConfig encoder = small_config(AttentionKind::dint, DintIntegral::global_mean);
    encoder.causal = false;
    list.push_back({"dint global_mean encoder", encoder});
    ModelConfig diff_encoder = small_config(AttentionKind::diff);
    diff_encoder.causal = false;
    list.push_back({"diff encoder", diff_encoder});
    return list;
}

template <typename T>
RowMatrix<T> across_ranks(const DecoderModel<T>& model, const std::vector<Token>& tokens) {
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    const Index n = static_cast<Index>(tokens.size());
    const distributed::SequenceSlices slices = distributed::model_slices(model, n, ranks);
    ForwardState<T> state = model.make_state(slices.rows(rank));  // this rank's rows only
    RowMatrix<T> logits(n, model.config().vocab_size);
    distributed::distributed_forward<T>(model, tokens, slices, state, logits, MPI_COMM_WORLD);
    // The state's own rotary table (positions [0, rows)) is back: a one-process forward still works.
    CHECK(state.layer.attention.rotary.first_position() == 0);
    CHECK(state.layer.attention.rotary.max_positions() == slices.rows(rank));
    return logits;
}

template <typename A, typename B>
double max_abs_diff(const A& a, const B& b) {
    return (a.template cast<double>() - b.template cast<double>()).cwiseAbs().maxCoeff();
}

TEST_CASE("a model's logits across ranks equal one process's", "[distributed][model]") {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    constexpr double kEpsFloat = std::numeric_limits<float>::epsilon();
    std::vector<Token> tokens;
    for (int i = 0; i < 150; ++i) tokens.push_back(static_cast<Token>((i * 37 + 11) % 64));  // past one query block
    for (const NamedModel& m : models()) {
        INFO("model " << m.name);
        const DecoderModel<double> model_d = DecoderModel<double>::seeded(m.config, 3);
        const DecoderModel<float> model_f = DecoderModel<float>::seeded(m.config, 3);
        const RowMatrix<double> ring_d = across_ranks(model_d, tokens);
        const RowMatrix<float> ring_f = across_ranks(model_f, tokens);
        if (rank != 0) continue;  // rank 0 alone holds the gathered logits
        const RowMatrix<double> full_d = model_d.logits(tokens);
        const RowMatrix<float> full_f = model_f.logits(tokens);
        const double magnitude = full_d.cwiseAbs().maxCoeff();
        const double e_full = max_abs_diff(full_f, full_d);  // float's own rounding, one process
        INFO("double error " << max_abs_diff(ring_d, full_d) << ", float error " << max_abs_diff(ring_f, full_d)
                             << ", one-process float error " << e_full << ", magnitude " << magnitude);
        CHECK(max_abs_diff(ring_d, full_d) <= 1e-12 * magnitude);
        CHECK(max_abs_diff(ring_f, full_d) <= 2 * e_full + 16 * kEpsFloat * magnitude);
    }
}

TEST_CASE("a model forward across ranks refuses mismatched arguments on every rank", "[distributed][model]") {
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    const DecoderModel<float> model = DecoderModel<float>::seeded(small_config(AttentionKind::diff), 3);
    const std::vector<Token> tokens(12, 5);
    ForwardState<float> state = model.make_state(12);
    RowMatrix<float> logits(12, model.config().vocab_size);
    // Slices for another number of ranks than the communicator has.
    CHECK_THROWS_WITH(distributed::distributed_forward<float>(model, tokens, distributed::balanced_slices(12, ranks + 1, true),
                                                              state, logits, MPI_COMM_WORLD),
                      Catch::Contains("slices are for " + std::to_string(ranks + 1) + " ranks but the communicator has " +
                                      std::to_string(ranks)));
    // Rank 0's logits of the wrong shape: rank 0 says so, every other rank names rank 0.
    RowMatrix<float> short_logits(rank == 0 ? 11 : 12, model.config().vocab_size);
    CHECK_THROWS_AS(distributed::distributed_forward<float>(model, tokens, distributed::balanced_slices(12, ranks, true),
                                                            state, short_logits, MPI_COMM_WORLD),
                    Error);
    // Different sequences on different ranks.
    std::vector<Token> other = tokens;
    other[3] = static_cast<Token>(rank);
    if (ranks > 1) {
        CHECK_THROWS_WITH(distributed::distributed_forward<float>(model, other, distributed::balanced_slices(12, ranks, true),
                                                                  state, logits, MPI_COMM_WORLD),
                          Catch::Contains("different token sequences"));
    }
    // A state shorter than this rank's slice: that rank says so, every other rank names it.
    const distributed::SequenceSlices slices = distributed::balanced_slices(12, ranks, true);
    ForwardState<float> short_state = model.make_state(rank == ranks - 1 ? slices.rows(rank) - 1 : 12);
    if (slices.rows(ranks - 1) > 1) {
        if (rank == ranks - 1) {
            CHECK_THROWS_WITH(
                distributed::distributed_forward<float>(model, tokens, slices, short_state, logits, MPI_COMM_WORLD),
                Catch::Contains("slice has " + std::to_string(slices.rows(rank))));
        } else {
            CHECK_THROWS_AS(
                distributed::distributed_forward<float>(model, tokens, slices, short_state, logits, MPI_COMM_WORLD),
                Error);
        }
    }
    // The state serves a one-process forward again afterwards.
    CHECK(state.layer.attention.kernels == nullptr);
}

}  // namespace
