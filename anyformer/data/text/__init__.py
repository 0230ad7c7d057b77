"""Text for language models: where a corpus comes from, reading it, its tokens, and the tokenizers.

One file a question:
- `sources`: which files a text source is (a file, a folder's text files, the name ``shakespeare``);
- `read`: each file decoded (UTF-8 or UTF-16, refusing what is not text) and the files as one stream;
- `corpus`: the source tokenized once into a memory-mapped, cached token stream (`load_corpus`);
- `tokenizers`: characters, GPT-2's BPE, and `load_tokenizer` / `tokenizer_from_info` for any kind;
- `bpe`: tokenizers of the `tokenizers` library (a BPE learned from the text, a tokenizer.json);
- `decode`: token ids back to text, checked and streamed, for every tokenizer.
"""

from .bpe import EOT, TOKENIZER_FILE, HFTokenizer, bpe_vocab_size, learn_bpe, read_tokenizer_file
from .corpus import TokenCorpus, load_corpus
from .decode import StreamDecoder, StreamText, checked_ids
from .read import read_text
from .sources import TEXT_NAMES, resolve_text
from .tokenizers import BPETokenizer, CharTokenizer, gpt2_encoding, load_tokenizer, tokenizer_from_info

__all__ = [
    "BPETokenizer",
    "CharTokenizer",
    "EOT",
    "HFTokenizer",
    "StreamDecoder",
    "StreamText",
    "TEXT_NAMES",
    "TOKENIZER_FILE",
    "TokenCorpus",
    "bpe_vocab_size",
    "checked_ids",
    "gpt2_encoding",
    "learn_bpe",
    "load_corpus",
    "load_tokenizer",
    "read_text",
    "read_tokenizer_file",
    "resolve_text",
    "tokenizer_from_info",
]
