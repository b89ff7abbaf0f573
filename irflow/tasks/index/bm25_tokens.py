"""BM25's tokens: ``title + " " + text``, lower-cased, split on ``\\w\\w+``, English stopwords removed, Snowball
English stems (PyStemmer), the same for both backends; a corpus's tokens held as flat arrays
(:class:`CorpusTokens`) and cached under ``cache_dir()/bm25/tokens/<key>`` (fingerprint and tokenizer only), so a
k1/b sweep tokenizes once."""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import shutil
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from irflow.tasks.core import progress
from irflow.tasks.core.atomic import publish_dir, write_json
from irflow.tasks.core.config import cache_dir
from irflow.tasks.core.schema import Dataset
from irflow.tasks.systems.specs import BM25Spec

log = logging.getLogger(__name__)

BM25_CODE_VERSION = "1"  # bump when tokenisation or index layout changes: old cache entries are then ignored
TOKEN_PATTERN = r"(?u)\b\w\w+\b"


def tokenize(texts: Sequence[str], spec: BM25Spec, *, return_ids: bool = False, show_progress: bool = False) -> Any:
    """Token lists for ``texts`` under the spec's stopwords and stemmer (shared by both backends).

    ``return_ids=True`` gives bm25s's ``Tokenized(ids, vocab)`` instead, which it indexes faster;
    ``show_progress``: bm25s's own bar (texts/s, ETA), for a whole corpus on a terminal.
    """
    import bm25s

    return bm25s.tokenize(
        list(texts),
        token_pattern=TOKEN_PATTERN,
        stopwords="en" if spec.stopwords == "en" else None,
        stemmer=_stemmer() if spec.stemmer == "snowball" else None,
        return_ids=return_ids,
        show_progress=show_progress,
    )


_THREAD = threading.local()


def _stemmer() -> Any:
    """This thread's Snowball English stemmer (made once: building one costs more than stemming a query)."""
    stemmer = getattr(_THREAD, "stemmer", None)
    if stemmer is None:
        import Stemmer

        stemmer = _THREAD.stemmer = Stemmer.Stemmer("english")
    return stemmer


@dataclass
class CorpusTokens:
    """A tokenized corpus held as flat arrays, in the shape bm25s's ``index()`` accepts (``.ids``, ``.vocab``).

    ``flat`` is the stem id of every kept token, document after document; ``lengths`` the tokens
    per document. Cached on disk per dataset fingerprint and tokenizer, so another k1, b or method
    on the same corpus rebuilds only the score matrix.
    """

    flat: np.ndarray
    lengths: np.ndarray
    vocab: dict[str, int]

    @property
    def ids(self) -> CorpusTokens:
        return self  # bm25s hands ``corpus.ids`` to build_index_from_ids: that is build_scores's input

    def __len__(self) -> int:
        return len(self.lengths)

    @classmethod
    def from_lists(cls, ids: Sequence[Sequence[int]], vocab: dict[str, int]) -> CorpusTokens:
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(lengths.sum()))
        return cls(flat, lengths, dict(vocab))

    def save(self, folder: Path) -> None:
        np.save(folder / "flat.npy", self.flat)
        np.save(folder / "lengths.npy", self.lengths)
        write_json(folder / "vocab.json", self.vocab)

    @classmethod
    def load(cls, folder: Path) -> CorpusTokens:
        vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        return cls(np.load(folder / "flat.npy"), np.load(folder / "lengths.npy"), vocab)


def tokenizer_identity(spec: BM25Spec) -> dict[str, object]:
    """What decides the tokens of a text: part of both the token and the index cache keys."""
    return {
        "fields": "title text",
        "lower": True,
        "pattern": TOKEN_PATTERN,
        "stopwords": spec.stopwords,
        "stemmer": spec.stemmer,
    }


def tokens_key(dataset: Dataset, spec: BM25Spec) -> str:
    """sha256 over what changes the corpus tokens (not k1, b or method); the name of their cache folder."""
    identity = {
        "fingerprint": dataset.fingerprint,
        "code": BM25_CODE_VERSION,
        "bm25s": metadata.version("bm25s"),
        "tokenizer": tokenizer_identity(spec),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def corpus_tokens(dataset: Dataset, spec: BM25Spec) -> CorpusTokens:
    """The dataset's corpus tokenized for ``spec``: from the cache, else tokenized and cached (atomically)."""
    path = cache_dir() / "bm25" / "tokens" / tokens_key(dataset, spec)
    if (path / "vocab.json").exists():
        try:
            tokens = CorpusTokens.load(path)
            if len(tokens) == len(dataset.corpus) and int(tokens.lengths.sum()) == len(tokens.flat):
                return tokens
        except (OSError, ValueError) as exc:
            log.warning("BM25 token cache %s unreadable (%s); tokenizing again", path, exc)
        shutil.rmtree(path, ignore_errors=True)
    tokenized = tokenize(document_texts(dataset), spec, return_ids=True, show_progress=progress.enabled(sys.stderr))
    tokens = CorpusTokens.from_lists(tokenized.ids, tokenized.vocab)
    with publish_dir(path) as tmp:
        tokens.save(tmp)
    return tokens


def document_texts(dataset: Dataset) -> list[str]:
    """What BM25 indexes: ``title + " " + text`` per document."""
    corpus = dataset.corpus
    return (corpus["title"].fillna("").astype("str") + " " + corpus["text"].fillna("").astype("str")).tolist()


__all__ = [
    "BM25_CODE_VERSION",
    "TOKEN_PATTERN",
    "CorpusTokens",
    "corpus_tokens",
    "document_texts",
    "tokenize",
    "tokenizer_identity",
    "tokens_key",
]
