// The byte-level BPE model: a word (one pre-tokenizer piece, raw bytes) -> token ids
// (docs/tokenizer.md).
//
// The word starts as one symbol per byte; the adjacent pair of lowest merge rank is merged, the
// leftmost on a tie, until no adjacent pair has a merge. This is Hugging Face tokenizers' queue
// algorithm (models/bpe/word.rs, merge_all): a min-heap of (rank, position) entries over a linked
// list of symbols, an entry discarded when its pair has changed since it was queued, so a word of
// n bytes costs O(n log n). With ignore_merges (Llama 3), a word that is a vocabulary token as a
// whole is that token, whatever the merges would make of it.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/text/byte_level.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace diffattn::text {

class BpeModel {
public:
    /// `vocab`: (token in the byte-level alphabet, id) pairs; `merges`: (left, right) token pairs,
    /// highest priority first. ConfigError, prefixed with `source`, if a byte value has no token
    /// (each of the 256 must have one, so that any text encodes; diffattn has no unknown token),
    /// a token is empty or repeated, or a merge names a token, or makes one, not in `vocab`.
    /// A pair listed twice keeps its last rank, as Hugging Face tokenizers does.
    BpeModel(const std::vector<std::pair<std::string, std::int32_t>>& vocab,
             const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
             const std::string& source)
        : tables_(std::make_shared<Tables>()) {
        Tables& t = *tables_;
        t.ignore_merges = ignore_merges;
        std::unordered_map<std::string_view, std::int32_t> id_of_token;
        id_of_token.reserve(vocab.size());
        for (const auto& [token, id] : vocab) {
            require<ConfigError>(!token.empty(), source, ": model.vocab has an empty token (id ", id, ")");
            require<ConfigError>(id_of_token.emplace(token, id).second, source, ": model.vocab lists \"", token,
                                 "\" twice");
        }
        // Tokens outside the alphabet (none in Llama 3 or GPT-2) can never come out of a word.
        // `bytes` is reserved once: the views in id_of_bytes point into its strings.
        t.bytes.reserve(vocab.size());
        std::vector<std::int32_t> ids;
        ids.reserve(vocab.size());
        for (const auto& [token, id] : vocab) {
            if (std::optional<std::string> bytes = byte_level_decode(token)) {
                t.bytes.push_back(std::move(*bytes));
                ids.push_back(id);
            }
        }
        t.id_of_bytes.reserve(t.bytes.size());
        for (std::size_t i = 0; i < t.bytes.size(); ++i) t.id_of_bytes.emplace(t.bytes[i], ids[i]);
        for (int b = 0; b < 256; ++b) {
            const char byte = static_cast<char>(b);
            const auto it = t.id_of_bytes.find(std::string_view(&byte, 1));
            require<ConfigError>(it != t.id_of_bytes.end(), source, ": model.vocab has no token for byte ", b, " (\"",
                                 byte_level_encode(std::string_view(&byte, 1)),
                                 "\"); a byte-level vocabulary needs all 256");
            t.byte_ids[static_cast<std::size_t>(b)] = it->second;
        }
        t.merges.reserve(merges.size());
        std::string merged;
        for (std::size_t rank = 0; rank < merges.size(); ++rank) {
            const std::string& left = merges[rank].first;  // not a structured binding: the lambda
            const std::string& right = merges[rank].second;  // below captures them (C++17)
            const auto id = [&](const std::string& token, const char* what) {
                const auto it = id_of_token.find(token);
                require<ConfigError>(it != id_of_token.end(), source, ": model.merges[", rank, "] (\"", left, " ",
                                     right, "\"): its ", what, " \"", token, "\" is not in model.vocab");
                return it->second;
            };
            const std::int32_t left_id = id(left, "left token");
            const std::int32_t right_id = id(right, "right token");
            merged = left + right;
            t.merges[pair_key(left_id, right_id)] = Merge{static_cast<std::uint32_t>(rank), id(merged, "merged token")};
        }
    }

    /// Appends the ids of word `bytes` (non-empty) to `ids`.
    void encode_word(std::string_view bytes, std::vector<std::int32_t>& ids) const {
        const Tables& t = *tables_;
        if (t.ignore_merges) {
            const auto it = t.id_of_bytes.find(bytes);
            if (it != t.id_of_bytes.end()) {
                ids.push_back(it->second);
                return;
            }
        }
        // symbols[i]: the symbol that starts at byte i, alive while len > 0.
        struct Symbol {
            std::int32_t id;
            std::ptrdiff_t prev, next;
            std::size_t len;
        };
        std::vector<Symbol> symbols(bytes.size());
        for (std::size_t i = 0; i < bytes.size(); ++i) {
            symbols[i] = {t.byte_ids[static_cast<unsigned char>(bytes[i])], static_cast<std::ptrdiff_t>(i) - 1,
                          i + 1 < bytes.size() ? static_cast<std::ptrdiff_t>(i + 1) : -1, 1};
        }
        struct Entry {
            std::uint32_t rank;
            std::size_t pos;
            std::int32_t new_id;
            bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
        };
        std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
        const auto push = [&](std::size_t pos) {
            const Symbol& s = symbols[pos];
            if (s.next < 0) return;
            const auto it = t.merges.find(pair_key(s.id, symbols[static_cast<std::size_t>(s.next)].id));
            if (it != t.merges.end()) queue.push({it->second.rank, pos, it->second.new_id});
        };
        for (std::size_t i = 0; i + 1 < bytes.size(); ++i) push(i);
        while (!queue.empty()) {
            const Entry top = queue.top();
            queue.pop();
            Symbol& left = symbols[top.pos];
            if (left.len == 0 || left.next < 0) continue;
            const auto right_pos = static_cast<std::size_t>(left.next);
            const Symbol right = symbols[right_pos];
            // A stale entry: the pair at this position has changed since it was queued.
            const auto it = t.merges.find(pair_key(left.id, right.id));
            if (it == t.merges.end() || it->second.new_id != top.new_id) continue;
            left.id = top.new_id;
            left.len += right.len;
            left.next = right.next;
            symbols[right_pos].len = 0;
            if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = static_cast<std::ptrdiff_t>(top.pos);
            if (left.prev >= 0) push(static_cast<std::size_t>(left.prev));
            push(top.pos);
        }
        for (std::ptrdiff_t i = 0; i >= 0; i = symbols[static_cast<std::size_t>(i)].next) {
            ids.push_back(symbols[static_cast<std::size_t>(i)].id);
        }
    }

    bool ignore_merges() const { return tables_->ignore_merges; }

private:
    struct Merge {
        std::uint32_t rank;
        std::int32_t new_id;
    };
    static std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
        return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
    }
    // Immutable once built and shared by copies (the views in id_of_bytes point into bytes).
    struct Tables {
        bool ignore_merges = false;
        std::vector<std::string> bytes;                                 // the bytes of each token
        std::unordered_map<std::string_view, std::int32_t> id_of_bytes;  // views into `bytes`
        std::array<std::int32_t, 256> byte_ids{};                        // the token of each byte
        std::unordered_map<std::uint64_t, Merge> merges;                 // (left, right) -> merge
    };
    std::shared_ptr<Tables> tables_;
};

}  // namespace diffattn::text
