// What an attention analysis is asked for: the query rows of a token sequence, and for each the
// key positions of its answer span and of its noise context (the two masses of the measure,
// analysis/row_measure.hpp), and whether to keep its full maps. Checked where it enters.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/core/types.hpp"

#include <string>
#include <vector>

namespace diffattn::analysis {

/// One query row to analyse.
struct AnalysisRow {
    Index position = 0;          ///< the query row n (token position), in [0, N)
    std::vector<Index> answer;   ///< key positions of the answer span, strictly increasing, in [0, N)
    std::vector<Index> noise;    ///< key positions of the noise context, strictly increasing, in [0, N)
    bool keep_maps = false;      ///< keep this row's full maps (A1, A2, I, combined) in the result
};

/// Throws unless `rows` fit a sequence of `seq_len` tokens: every position and every answer and
/// noise position in [0, seq_len) (ShapeError naming the row, the list, the value and the
/// sequence), row positions strictly increasing, each answer and noise list strictly increasing,
/// and no position in both lists of a row, whose mass the measure would count as answer and as
/// noise (OptionError naming them). `function` starts the message.
inline void check_rows(const char* function, const std::vector<AnalysisRow>& rows, Index seq_len) {
    const auto check_list = [&](std::size_t r, const char* list_name, const std::vector<Index>& list) {
        for (std::size_t i = 0; i < list.size(); ++i) {
            require<ShapeError>(list[i] >= 0 && list[i] < seq_len, function, ": rows[", r, "].", list_name, "[", i,
                                "] is ", list[i], ", outside the sequence of ", seq_len, " tokens [0, ", seq_len, ")");
            if (i == 0) continue;  // list[i - 1] is read only when there is one
            require<OptionError>(list[i] > list[i - 1], function, ": rows[", r, "].", list_name, "[", i, "] is ",
                                 list[i], " after ", list[i - 1], "; the ", list_name,
                                 " positions must be strictly increasing");
        }
    };
    for (std::size_t r = 0; r < rows.size(); ++r) {
        const Index n = rows[r].position;
        require<ShapeError>(n >= 0 && n < seq_len, function, ": rows[", r, "] is query row ", n,
                            ", outside the sequence of ", seq_len, " tokens [0, ", seq_len, ")");
        require<OptionError>(r == 0 || n > rows[r - 1].position, function, ": rows[", r, "] is query row ", n,
                             " after row ", r == 0 ? 0 : rows[r - 1].position,
                             "; rows must be strictly increasing");
        check_list(r, "answer", rows[r].answer);
        check_list(r, "noise", rows[r].noise);
        const std::vector<Index>& answer = rows[r].answer;
        const std::vector<Index>& noise = rows[r].noise;
        for (std::size_t a = 0, b = 0; a < answer.size() && b < noise.size();) {  // both sorted: one merge
            require<OptionError>(answer[a] != noise[b], function, ": rows[", r, "].answer[", a, "] and noise[", b,
                                 "] are both position ", answer[a], "; a position is answer or noise, not both");
            answer[a] < noise[b] ? ++a : ++b;
        }
    }
}

}  // namespace diffattn::analysis
