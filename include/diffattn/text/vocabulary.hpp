// Token ids <-> token strings for the model vocabulary and the added tokens together, and the
// bytes each id decodes to (docs/tokenizer.md). All id checks of a tokenizer.json live here.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/text/added_tokens.hpp"
#include "diffattn/text/byte_level.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace diffattn::text {

class Vocabulary {
public:
    Vocabulary() = default;
    Vocabulary(const Vocabulary&) = delete;  // id_of_text_ views the strings of entries_
    Vocabulary& operator=(const Vocabulary&) = delete;
    Vocabulary(Vocabulary&&) = default;      // a moved vector keeps its elements where they are
    Vocabulary& operator=(Vocabulary&&) = default;

    /// ConfigError, prefixed with `source`, if two vocabulary tokens share an id, an added token
    /// takes the id of a different vocabulary token or is in the vocabulary under another id, two
    /// added tokens share an id, or the ids are so sparse (largest id >= 2 x the number of tokens
    /// + 1024) that a table by id would be mostly holes.
    Vocabulary(const std::vector<std::pair<std::string, std::int32_t>>& vocab, const std::vector<AddedToken>& added,
               const std::string& source) {
        std::int64_t largest = -1;
        for (const auto& entry : vocab) largest = std::max<std::int64_t>(largest, entry.second);
        for (const AddedToken& t : added) largest = std::max<std::int64_t>(largest, t.id);
        const auto count = static_cast<std::int64_t>(vocab.size() + added.size());
        require<ConfigError>(largest < 2 * count + 1024, source, ": token ids go up to ", largest, " for ", count,
                             " tokens; diffattn needs ids without large gaps");
        entries_.resize(static_cast<std::size_t>(largest + 1));
        for (const auto& [token, id] : vocab) {
            Entry& e = entries_[static_cast<std::size_t>(id)];
            require<ConfigError>(!e.known, source, ": model.vocab gives id ", id, " to both \"", e.text, "\" and \"",
                                 token, "\"");
            e = {token, byte_level_token_bytes(token), true, false};
        }
        std::unordered_map<std::string_view, std::int32_t> vocab_ids;
        vocab_ids.reserve(vocab.size());
        for (const auto& [token, id] : vocab) vocab_ids.emplace(token, id);
        std::vector<char> added_id(entries_.size(), 0);
        for (const AddedToken& t : added) {
            Entry& e = entries_[static_cast<std::size_t>(t.id)];
            require<ConfigError>(!added_id[static_cast<std::size_t>(t.id)], source, ": added_tokens give id ", t.id,
                                 " to both \"", e.text, "\" and \"", t.content, "\"");
            added_id[static_cast<std::size_t>(t.id)] = 1;
            require<ConfigError>(!e.known || e.text == t.content, source, ": the added token \"", t.content,
                                 "\" has id ", t.id, ", which model.vocab gives to \"", e.text, "\"");
            const auto in_vocab = vocab_ids.find(t.content);
            require<ConfigError>(in_vocab == vocab_ids.end() || in_vocab->second == t.id, source,
                                 ": the added token \"", t.content, "\" has id ", t.id, " but model.vocab gives it id ",
                                 in_vocab == vocab_ids.end() ? -1 : in_vocab->second);
            e = {t.content, byte_level_token_bytes(t.content), true, t.special};
        }
        id_of_text_.reserve(entries_.size());
        for (std::size_t id = 0; id < entries_.size(); ++id) {
            if (entries_[id].known) id_of_text_.emplace(entries_[id].text, static_cast<std::int32_t>(id));
        }
    }

    /// One more than the largest id (the number of embedding rows a model needs).
    std::int32_t size() const { return static_cast<std::int32_t>(entries_.size()); }

    bool contains(std::int32_t id) const {
        return id >= 0 && static_cast<std::size_t>(id) < entries_.size() && entries_[static_cast<std::size_t>(id)].known;
    }

    std::optional<std::int32_t> id(std::string_view token) const {
        const auto it = id_of_text_.find(token);
        return it == id_of_text_.end() ? std::nullopt : std::optional<std::int32_t>(it->second);
    }

    /// The token string of a known id (contains(id)): a vocabulary key (byte-level alphabet) or an
    /// added token's content.
    const std::string& text(std::int32_t id) const { return entries_[static_cast<std::size_t>(id)].text; }
    /// The bytes a known id decodes to (byte_level_token_bytes of its text).
    const std::string& bytes(std::int32_t id) const { return entries_[static_cast<std::size_t>(id)].bytes; }
    /// True for a known id of a special added token.
    bool special(std::int32_t id) const { return entries_[static_cast<std::size_t>(id)].special; }

private:
    struct Entry {
        std::string text;
        std::string bytes;
        bool known = false;
        bool special = false;
    };
    std::vector<Entry> entries_;                                    // by id; never resized once built
    std::unordered_map<std::string_view, std::int32_t> id_of_text_;  // views into entries_
};

}  // namespace diffattn::text
