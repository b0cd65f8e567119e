// Tokenizer: a Hugging Face tokenizer.json byte-level BPE tokenizer (Llama 3, DiffLlama, Motif):
// text -> ids and ids -> text (docs/tokenizer.md).
//
//   encode: check the text is UTF-8 -> find the added tokens (added_tokens.hpp) -> pre-tokenize
//           the text between them (pre_tokenizer.hpp) -> BPE each piece (bpe_model.hpp) -> put the
//           post-processor's special tokens around the ids (post_processor.hpp)
//   decode: the bytes of each id (vocabulary.hpp) -> UTF-8, invalid bytes as U+FFFD (utf8.hpp)
//
// Needs PCRE2 at link time (pcre2_regex.hpp). A Tokenizer is immutable: copies share its tables,
// and the const member functions may run concurrently.
#pragma once

#include "diffattn/core/error.hpp"
#include "diffattn/io/json_file.hpp"
#include "diffattn/text/added_tokens.hpp"
#include "diffattn/text/bpe_model.hpp"
#include "diffattn/text/post_processor.hpp"
#include "diffattn/text/pre_tokenizer.hpp"
#include "diffattn/text/tokenizer_config_json.hpp"
#include "diffattn/text/tokenizer_json.hpp"
#include "diffattn/text/utf8.hpp"
#include "diffattn/text/vocabulary.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace diffattn::text {

class Tokenizer {
public:
    /// Reads tokenizer.json at `path`, or in the directory `path`. If a tokenizer_config.json lies
    /// beside it, its bos_token / eos_token name bos_id() / eos_id(). FileError naming the file for
    /// a missing, unreadable or oversized tokenizer.json (max_tokenizer_json_bytes), or a
    /// tokenizer_config.json present but unreadable (a dangling link); ConfigError naming the file
    /// and the key for content outside the supported subset or over a limit (tokenizer_json.hpp).
    static Tokenizer load(const std::filesystem::path& path) {
        namespace fs = std::filesystem;
        std::error_code error;
        const fs::path file = fs::is_directory(path, error) ? path / "tokenizer.json" : path;
        const std::string source = diffattn::detail::concat("tokenizer.json \"", file.string(), "\"");
        const std::string text =
            diffattn::detail::read_text_file(file, source, max_tokenizer_json_bytes, "a tokenizer.json");
        Tokenizer tokenizer = from_json_text(text, source);
        const fs::path config_file = file.parent_path() / "tokenizer_config.json";
        // Only a missing file is optional: one present but unreadable (a dangling link) would drop its bos / eos.
        const std::string config_source =
            diffattn::detail::concat("tokenizer_config.json \"", config_file.string(), "\"");
        if (diffattn::detail::optional_file_present(config_file, config_source)) {
            const std::string config_text = diffattn::detail::read_text_file(
                config_file, config_source, max_tokenizer_config_json_bytes, "a tokenizer_config.json");
            tokenizer.set_bos_eos(
                read_tokenizer_config_json(diffattn::detail::parse_json_text(config_text, config_source,
                                                                             max_tokenizer_json_depth,
                                                                             "a tokenizer config"),
                                           config_source),
                config_source);
        }
        return tokenizer;
    }

    /// Builds a tokenizer from parsed tokenizer.json; `source` names it in messages. bos_id() is
    /// the first special token the post-processor puts before the text, if any; eos_id() none.
    static Tokenizer from_json(const nlohmann::json& json, const std::string& source = "tokenizer.json") {
        return Tokenizer(read_tokenizer_json(json, source), source);
    }

    /// from_json of tokenizer.json text. A JSON syntax error is a ConfigError.
    static Tokenizer from_json_text(const std::string& text, const std::string& source = "tokenizer.json") {
        return from_json(diffattn::detail::parse_json_text(text, source, tokenizer_json_limits(), "a tokenizer"),
                         source);
    }

    /// The ids of `text` (UTF-8; an Error naming the offset of the first invalid byte otherwise),
    /// with the post-processor's special tokens (e.g. Llama 3.1's <|begin_of_text|>) around them
    /// if `add_special_tokens`. Added tokens written in the text are recognised either way.
    std::vector<std::int32_t> encode(std::string_view text, bool add_special_tokens = true) const {
        const std::size_t bad = first_invalid_utf8(text);
        if (bad != std::string_view::npos) {
            throw Error(diffattn::detail::concat("Tokenizer::encode: the text is not valid UTF-8: byte 0x", std::hex,
                                                 static_cast<unsigned>(static_cast<unsigned char>(text[bad])),
                                                 std::dec, " at offset ", bad, " of ", text.size()));
        }
        const Impl& d = *impl_;
        std::vector<std::int32_t> ids;
        ids.reserve(text.size() / 3 + 8);
        if (add_special_tokens) ids = d.post.prefix();
        std::vector<std::string> pieces;
        d.added.split(
            text,
            [&](std::string_view run) {
                d.pre.split(run, pieces);
                for (const std::string& piece : pieces) d.bpe.encode_word(piece, ids);
            },
            [&](const AddedToken& token) { ids.push_back(token.id); });
        if (add_special_tokens) ids.insert(ids.end(), d.post.suffix().begin(), d.post.suffix().end());
        return ids;
    }

    /// The text of `ids`: their bytes joined (an added token's content as it is written), invalid
    /// UTF-8 replaced by U+FFFD as Hugging Face's ByteLevel decoder does. Special tokens are left
    /// out if `skip_special_tokens`. An id that names no token is an Error.
    std::string decode(const std::vector<std::int32_t>& ids, bool skip_special_tokens = false) const {
        std::string bytes;
        for (const std::int32_t id : ids) {
            if (!skip_special_tokens || !is_special(id)) bytes += token_bytes(id);
        }
        std::string text;
        text.reserve(bytes.size());
        append_utf8_lossy(bytes, true, text);
        return text;
    }

    /// The id of a token string (a vocabulary key, in the byte-level alphabet: " the" is "Ġthe",
    /// or an added token's content), if there is one.
    std::optional<std::int32_t> token_to_id(std::string_view token) const { return impl_->vocab.id(token); }

    /// The token string of `id`, if it names one. The view lives as long as this tokenizer.
    std::optional<std::string_view> id_to_token(std::int32_t id) const {
        if (!impl_->vocab.contains(id)) return std::nullopt;
        return std::string_view(impl_->vocab.text(id));
    }

    /// The bytes `id` decodes to (maybe a fragment of a UTF-8 sequence). Error for an unknown id.
    std::string_view token_bytes(std::int32_t id) const {
        require<Error>(impl_->vocab.contains(id), "Tokenizer::decode: id ", id, " names no token (ids go up to ",
                       impl_->vocab.size() - 1, ")");
        return impl_->vocab.bytes(id);
    }

    /// True for the id of a special added token (<|eot_id|>, ...). Error for an unknown id.
    bool is_special(std::int32_t id) const {
        require<Error>(impl_->vocab.contains(id), "Tokenizer::is_special: id ", id, " names no token (ids go up to ",
                       impl_->vocab.size() - 1, ")");
        return impl_->vocab.special(id);
    }

    /// One more than the largest id: the embedding rows a model for this tokenizer needs.
    std::int32_t vocab_size() const { return impl_->vocab.size(); }

    std::optional<std::int32_t> bos_id() const { return bos_id_; }
    std::optional<std::int32_t> eos_id() const { return eos_id_; }

    const std::vector<AddedToken>& added_tokens() const { return impl_->added.tokens(); }

private:
    struct Impl {
        Vocabulary vocab;
        BpeModel bpe;
        AddedTokens added;
        PreTokenizer pre;
        PostProcessor post;
    };

    Tokenizer(TokenizerJson parts, const std::string& source)
        : impl_(std::make_shared<const Impl>(Impl{
              Vocabulary(parts.vocab, parts.added_tokens, source),
              BpeModel(parts.vocab, parts.merges, parts.ignore_merges, source),
              AddedTokens(std::move(parts.added_tokens), source), PreTokenizer(std::move(parts.pre_tokenizer)),
              PostProcessor(parts.prefix, parts.suffix)})) {
        for (const std::int32_t id : parts.prefix) check_post_processor_id(id, source);
        for (const std::int32_t id : parts.suffix) check_post_processor_id(id, source);
        if (!parts.prefix.empty()) bos_id_ = parts.prefix.front();
    }

    void check_post_processor_id(std::int32_t id, const std::string& source) const {
        require<ConfigError>(impl_->vocab.contains(id), source, ": post_processor: the template's special token id ", id,
                             " names no token");
    }

    void set_bos_eos(const TokenizerConfigJson& config, const std::string& source) {
        const auto id = [&](const std::optional<std::string>& token, const char* key) -> std::optional<std::int32_t> {
            if (!token) return std::nullopt;
            const std::optional<std::int32_t> found = token_to_id(*token);
            require<ConfigError>(found.has_value(), source, ": key \"", key, "\": \"", *token,
                                 "\" is not a token of the tokenizer");
            return found;
        };
        if (config.bos_token) bos_id_ = id(config.bos_token, "bos_token");
        eos_id_ = id(config.eos_token, "eos_token");
    }

    std::shared_ptr<const Impl> impl_;
    std::optional<std::int32_t> bos_id_, eos_id_;
};

}  // namespace diffattn::text
