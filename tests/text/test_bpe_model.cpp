// The BPE merge loop (bpe_model.hpp) on hand-made merges over the 256 byte tokens: lowest rank
// first, the leftmost pair on a tie, merges of merges, ignore_merges, and a long word.
#include "text_test_support.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <thread>
#include <vector>

using diffattn::text::Tokenizer;

namespace {

/// Tokenizer over the byte tokens plus `merges` ("a b"; results get ids from 256 in order).
Tokenizer merging(const std::vector<std::string>& merges, bool ignore_merges = false) {
    nlohmann::json j = text_test::with_merges(text_test::byte_tokenizer_json(), merges);
    j["model"]["ignore_merges"] = ignore_merges;
    return Tokenizer::from_json(j, "bpe test");
}

/// The token strings of `ids`.
std::vector<std::string> tokens(const Tokenizer& t, const std::vector<std::int32_t>& ids) {
    std::vector<std::string> out;
    for (const std::int32_t id : ids) out.emplace_back(*t.id_to_token(id));
    return out;
}

using Strings = std::vector<std::string>;

}  // namespace

TEST_CASE("bpe: the pair of lowest rank merges first") {
    const Tokenizer ab_first = merging({"a b", "b c"});
    CHECK(tokens(ab_first, ab_first.encode("abc")) == Strings{"ab", "c"});
    const Tokenizer bc_first = merging({"b c", "a b"});
    CHECK(tokens(bc_first, bc_first.encode("abc")) == Strings{"a", "bc"});
    const Tokenizer chained = merging({"a b", "ab c", "c d", "abc d"});
    // ab (0), then ab+c (1) before c+d (2): abc, d; then abc+d (3).
    CHECK(tokens(chained, chained.encode("abcd")) == Strings{"abcd"});
    CHECK(tokens(chained, chained.encode("cdab")) == Strings{"cd", "ab"});
}

TEST_CASE("bpe: on a tie the leftmost pair merges first") {
    const Tokenizer t = merging({"a a"});
    CHECK(tokens(t, t.encode("aaa")) == Strings{"aa", "a"});
    CHECK(tokens(t, t.encode("aaaaa")) == Strings{"aa", "aa", "a"});
    const Tokenizer t2 = merging({"a a", "aa a"});
    // aaa: a+a at 0 first -> aa,a -> aa+a -> aaa. aaaa: every a+a (rank 0) before any aa+a
    // (rank 1): aa,aa, which has no merge.
    CHECK(tokens(t2, t2.encode("aaa")) == Strings{"aaa"});
    CHECK(tokens(t2, t2.encode("aaaa")) == Strings{"aa", "aa"});
}

TEST_CASE("bpe: the merges work on the bytes of multi-byte characters, spaces included") {
    // é = C3 A9 = "Ã©" in the byte-level alphabet; ' ' = "Ġ".
    const Tokenizer t = merging({"Ã ©", "Ġ Ã©"});
    CHECK(tokens(t, t.encode("\xC3\xA9 \xC3\xA9")) == Strings{"Ã©", "ĠÃ©"});
    CHECK(t.decode(t.encode("\xC3\xA9 \xC3\xA9")) == "\xC3\xA9 \xC3\xA9");
}

TEST_CASE("bpe: ignore_merges takes a word that is a token as a whole") {
    nlohmann::json j = text_test::with_merges(text_test::byte_tokenizer_json(), {"a b", "b c"});
    j["model"]["vocab"]["abc"] = 300;  // no merge makes "abc"
    j["model"]["vocab"]["Ġabc"] = 301;
    j["model"]["ignore_merges"] = true;
    const Tokenizer ignoring = Tokenizer::from_json(j);
    CHECK(ignoring.encode("abc") == std::vector<std::int32_t>{300});
    CHECK(ignoring.encode("x abc") == std::vector<std::int32_t>{'x', 301});
    CHECK(tokens(ignoring, ignoring.encode("abcd")) == Strings{"ab", "c", "d"});
    j["model"]["ignore_merges"] = false;
    const Tokenizer merging_all = Tokenizer::from_json(j);
    CHECK(tokens(merging_all, merging_all.encode("abc")) == Strings{"ab", "c"});
}

TEST_CASE("bpe: a long word merges in O(n log n)") {
    const Tokenizer t = merging({"a a", "aa aa", "aaaa aaaa"});
    const std::vector<std::int32_t> ids = t.encode(std::string(100001, 'a'));
    REQUIRE(ids.size() == 12501);
    CHECK(tokens(t, {ids.front()}) == Strings{"aaaaaaaa"});
    CHECK(tokens(t, {ids.back()}) == Strings{"a"});
}

TEST_CASE("tokenizer: concurrent encodes of one tokenizer agree") {
    const Tokenizer t = text_test::golden_tokenizer("tiny_llama3");
    std::vector<std::vector<std::int32_t>> expected;
    for (const nlohmann::json& c : text_test::goldens().at("cases")) expected.push_back(t.encode(c.at("text").get<std::string>()));
    std::vector<int> mismatches(4, 0);
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k) {
        threads.emplace_back([&, k] {
            for (int round = 0; round < 5; ++round) {
                std::size_t i = 0;
                for (const nlohmann::json& c : text_test::goldens().at("cases")) {
                    if (t.encode(c.at("text").get<std::string>()) != expected[i++]) ++mismatches[static_cast<std::size_t>(k)];
                }
            }
        });
    }
    for (std::thread& thread : threads) thread.join();
    CHECK(mismatches == std::vector<int>(4, 0));
}
