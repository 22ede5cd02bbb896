"""A word-level tokenizer for tiny from-scratch policies (`transformers.PreTrainedTokenizerFast`).

Built on `tokenizers`: a ``WordLevel`` model over a closed vocabulary collected from a corpus
of texts (e.g. every sentence an environment can produce plus the analyzer's prompt and the
skill vocabulary; the household study's corpus is `experiments.household.tokenizer`).

Splitting (after the normaliser maps ' ' to '▁', U+2581): the text is cut into pieces by the
regex ``▁?</?(think|action)>`` | ``▁?[A-Za-z]+`` | ``▁?[0-9]`` | ``▁?<one other non-space
character>`` | ``▁`` | ``<one whitespace character>``. A piece keeps the one space in front of
it ('▁go'), so words, digits (one per token) and punctuation marks have two forms each;
'<think>', '</think>', '<action>', '</action>' are single tokens; '\\n' and the other
whitespace characters are tokens of their own. The vocabulary holds both forms of every word
(as written, lower-cased and capitalised) and of every digit and ASCII punctuation mark.

Decoding concatenates the pieces and turns '▁' back into ' ' (`decoders.Replace` + `Fuse`),
so **decode(encode(text)) == text exactly** whenever every piece of `text` is in the
vocabulary and `text` holds no '▁' (which decodes as ' '). A piece outside the vocabulary
becomes ``<unk>`` and decodes as '<unk>' (`unknown_pieces` lists them). In particular the
decoder never puts a space inside or next to a tag, so `envs.actions.parse_action` reads
decoded responses exactly as the original text.

Special tokens: ``<|pad|>`` (id 0), ``<unk>`` (1), ``<|im_start|>`` (bos, 2), ``<|im_end|>``
(eos, 3); nothing is added automatically when encoding. Chat template (ChatML-like):
``<|im_start|>{role}\\n{content}<|im_end|>\\n`` per message, then ``<|im_start|>assistant\\n``
when a generation prompt is asked for. Saved with ``save_pretrained`` (tokenizer.json,
tokenizer_config.json, chat template) and loaded with `load_word_tokenizer` or
``AutoTokenizer.from_pretrained`` (no pickles, no remote code).
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Iterable

PAD, UNK, BOS, EOS = "<|pad|>", "<unk>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (PAD, UNK, BOS, EOS)
TAGS = ("<think>", "</think>", "<action>", "</action>")
SPACE_MARK = "\u2581"
PIECE_PATTERN = (rf"{SPACE_MARK}?</?(?:think|action)>|{SPACE_MARK}?[A-Za-z]+|{SPACE_MARK}?[0-9]"
                 rf"|{SPACE_MARK}?[^\sA-Za-z0-9{SPACE_MARK}]|{SPACE_MARK}|\s")
_PIECE_RE = re.compile(PIECE_PATTERN)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# words every tokenizer gets: chat roles and a small general English vocabulary for reasoning
# text (thinking) that the corpus may not contain
BASE_WORDS = (
    "system user assistant think action yes no not none true false ok valid invalid "
    "i you we it he she they me my your our its their this that these those there here "
    "a an the and or but so then than if else when while because since until before after "
    "first second third next last now again also only just still already never always maybe "
    "of in on at to from with without into onto by for about over under inside outside "
    "is are was were be been being am do does did done have has had having can could will would "
    "should must may might need needs want wants try tries tried use used using see saw seen "
    "go goes went gone get gets got find found take took taken put puts open opened close closed "
    "look looks looked check checked hold holding held carry carrying heat heated cool cooled "
    "clean cleaned place placed move moved search searched visit visited return returned "
    "what where which who why how all any some each every many more most less few one two three "
    "four five six seven eight nine ten step steps task tasks goal object objects item items "
    "receptacle receptacles container containers location place room plan plans rule rules "
    "good bad better best wrong right correct mistake mistakes error errors fail failed failure "
    "success succeeded successful skill skills lesson summary episode episodes agent agents "
    "action actions observation observations response responses answer answers json field fields "
    "string strings text word words format order hot cold warm sure unsure know knew think thought "
    "probably likely nothing something anything empty full inside seen unseen already yet still"
).split()


def _pieces(text: str) -> list[str]:
    """The pieces of `text` (the split described in the module docstring), in order."""
    return _PIECE_RE.findall(text.replace(" ", SPACE_MARK))


def _word_forms(word: str) -> set[str]:
    forms = {word, word.lower(), word.capitalize()} if word.isalpha() else {word}
    return {f for w in forms for f in (w, SPACE_MARK + w)}


def build_vocab(corpus: Iterable[str], extra_words: Iterable[str] = ()) -> dict[str, int]:
    """Token -> id: the special tokens, then the sorted set of pieces (both space forms, three
    cases for words) of every corpus text, of `extra_words`, `BASE_WORDS`, the tags, digits,
    single ASCII letters, ASCII punctuation and whitespace characters."""
    pieces: set[str] = set()
    seeds = list(BASE_WORDS) + list(TAGS) + list(string.digits) + list(string.punctuation) + list(string.ascii_letters)
    for text in list(corpus) + list(extra_words) + seeds:
        for piece in _pieces(text):
            bare = piece.lstrip(SPACE_MARK)
            pieces |= _word_forms(bare) if bare and not bare.isspace() else {piece}
    pieces |= {"\n", "\t", "\r", SPACE_MARK}
    pieces -= set(SPECIAL_TOKENS)
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for piece in sorted(pieces):
        vocab[piece] = len(vocab)
    return vocab


def build_word_tokenizer(corpus: Iterable[str], extra_words: Iterable[str] = (), model_max_length: int = 4096):
    """A `PreTrainedTokenizerFast` whose vocabulary covers `corpus` (see module docstring)."""
    # deferred: tokenizers / transformers take seconds to import (as in seed_jax.models.tokenizer)
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = build_vocab(corpus, extra_words)
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tk.normalizer = normalizers.Replace(" ", SPACE_MARK)
    tk.pre_tokenizer = pre_tokenizers.Split(Regex(PIECE_PATTERN), behavior="isolated")
    tk.decoder = decoders.Sequence([decoders.Replace(SPACE_MARK, " "), decoders.Fuse()])
    tk.add_special_tokens(list(SPECIAL_TOKENS))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token=PAD, unk_token=UNK, bos_token=BOS, eos_token=EOS,
        clean_up_tokenization_spaces=False, model_max_length=model_max_length)
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def load_word_tokenizer(path: str | os.PathLike):
    """Load a tokenizer saved with ``save_pretrained`` (left padding, as generation needs)."""
    from transformers import PreTrainedTokenizerFast  # deferred: transformers takes seconds to import

    tok = PreTrainedTokenizerFast.from_pretrained(str(path))
    tok.padding_side = "left"
    return tok


def unknown_pieces(tokenizer, text: str) -> list[str]:
    """Pieces of `text` that the tokenizer maps to ``<unk>`` (empty when `text` round-trips)."""
    vocab = tokenizer.get_vocab()
    return [p for p in _pieces(text) if p not in vocab]

