"""System specs: canonical round trip (hand-picked and generated), normalisation, errors, slugs."""

from __future__ import annotations

import random
import re
import subprocess
import sys

import pytest

from irflow.tasks.core.schema import InputError, UnknownNameError
from irflow.tasks.systems.specs import (
    BM25_METHODS,
    INDEX_PARAMS,
    BM25Spec,
    DenseSpec,
    HybridSpec,
    RerankSpec,
    as_spec,
    leaves,
    parse_system,
    walk,
)

MINILM = "sentence-transformers/all-MiniLM-L6-v2"

VALID = [
    "bm25",
    "bm25:k1=0.9,b=0.4",
    "bm25:k1=1.2,b=0.75",
    "bm25(k1=1.2)",
    "bm25:backend=rank_bm25",
    "bm25:backend=rank_bm25,method=bm25l",
    "bm25:method=bm25+,stemmer=none,stopwords=none",
    "bm25:method=atire",
    "dense:minilm",
    f"dense:{MINILM}",
    "dense:/models/my model",
    "dense:./minilm",
    "dense(max_seq_length=128,index=hnsw,M=32,efSearch=64):minilm",
    "dense(index=ivfpq,nlist=64,m=48,nbits=8,nprobe=8):mpnet",
    'dense(query_prompt="query: ",doc_prompt="passage: ",batch_size=8):intfloat/e5-small-v2',
    'dense(query_prompt="a \\"quoted\\", (odd) = prompt+bm25"):m/x',
    "hybrid:bm25+dense:minilm",
    "hybrid(k=60,weights=1:1):bm25+dense:minilm",
    "hybrid(k=10,weights=2:0.5,depth=1000):bm25:k1=1.2,b=0.75+dense:minilm",
    "hybrid:bm25:method=bm25++dense:minilm",
    "hybrid:bm25+bm25:backend=rank_bm25+dense:minilm+dense:mpnet",
    "hybrid:(hybrid:bm25+dense:minilm)+dense:mpnet",
    "hybrid:rerank:minilm@bm25+dense:mpnet",
    "hybrid:(rerank:minilm@hybrid:bm25+dense:minilm)+bm25",
    "rerank:cross-encoder/ms-marco-MiniLM-L-6-v2@bm25",
    "rerank(top=50):ms-marco-minilm@hybrid:bm25+dense:minilm",
    "rerank:a/b@rerank(top=10):c/d@dense(index=hnsw):minilm",
    "  bm25:k1=1.5  ",
]


@pytest.mark.parametrize("text", VALID)
def test_valid_specs_round_trip(text: str) -> None:
    spec = parse_system(text)
    canonical = str(spec)
    assert parse_system(canonical) == spec
    assert str(parse_system(canonical)) == canonical
    assert hash(parse_system(canonical)) == hash(spec)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("bm25:k1=0.9,b=0.4", "bm25"),
        ("bm25:b=0.40,k1=.9,backend=bm25s,method=lucene,stemmer=snowball,stopwords=en", "bm25"),
        ("bm25(k1=1.0)", "bm25:k1=1"),
        ("bm25:stopwords=none,b=0.75,k1=1.20", "bm25:k1=1.2,b=0.75,stopwords=none"),
        ("bm25:backend=rank_bm25,method=okapi", "bm25:backend=rank_bm25"),
        ("dense:minilm", f"dense:{MINILM}"),
        ("dense:sentence-transformers/all-MiniLM-L6-v2/", f"dense:{MINILM}"),
        ("dense(batch_size=32,index=flat):minilm", f"dense:{MINILM}"),
        ("dense(efSearch=64,M=16,index=hnsw):minilm", f"dense(index=hnsw,M=16,efSearch=64):{MINILM}"),
        ("hybrid(k=60,weights=1:1.0):bm25+dense:minilm", f"hybrid:bm25+dense:{MINILM}"),
        ("hybrid(weights=2:1):bm25 + dense:minilm", f"hybrid(weights=2:1):bm25+dense:{MINILM}"),
        ("rerank(top=100):minilm@bm25:k1=0.9", f"rerank:{MINILM}@bm25"),
        ("(rerank:minilm@(bm25))", f"rerank:{MINILM}@bm25"),
    ],
)
def test_canonical_form(text: str, canonical: str) -> None:
    assert str(parse_system(text)) == canonical


def test_parsed_fields() -> None:
    assert parse_system("bm25") == BM25Spec() == BM25Spec(k1=0.9, b=0.4, method="lucene")
    assert parse_system("bm25:backend=rank_bm25").method == "okapi"
    dense = parse_system("dense(max_seq_length=128,index=hnsw,M=32):minilm")
    assert dense == DenseSpec(model="minilm", max_seq_length=128, index="hnsw", index_params=(("M", "32"),))
    assert dense.model == MINILM and dense.index_params == (("M", "32"),)
    assert parse_system('dense(query_prompt="query: "):m/x').query_prompt == "query: "
    hybrid = parse_system("hybrid(k=30,weights=2:1):bm25+dense:minilm")
    assert isinstance(hybrid, HybridSpec) and hybrid.k == 30 and hybrid.weights == (2.0, 1.0)
    assert hybrid.systems == (BM25Spec(), DenseSpec(MINILM)) and hybrid.depth is None
    rerank = parse_system("rerank(top=50):ms-marco-minilm@hybrid:bm25+dense:minilm")
    assert isinstance(rerank, RerankSpec) and rerank.top == 50
    assert rerank.model == "cross-encoder/ms-marco-MiniLM-L-6-v2" and isinstance(rerank.first_stage, HybridSpec)
    assert parse_system("hybrid:bm25:method=bm25++dense:minilm").systems[0].method == "bm25+"
    assert as_spec(hybrid) is hybrid and as_spec("bm25") == BM25Spec()


def _random_spec(rng: random.Random, depth: int = 0) -> object:
    kind = rng.choice(["bm25", "dense", "hybrid", "rerank"] if depth < 3 else ["bm25", "dense"])
    if kind == "bm25":
        backend = rng.choice(list(BM25_METHODS))
        return BM25Spec(
            k1=rng.choice([0.9, 1.2, 1, 0.1 + 0.2, 2.5e-3]),
            b=rng.choice([0.4, 0.75, 0, 1]),
            backend=backend,
            method=rng.choice([None, *BM25_METHODS[backend]]),
            stemmer=rng.choice(["snowball", "none"]),
            stopwords=rng.choice(["en", "none"]),
        )
    if kind == "dense":
        index = rng.choice(list(INDEX_PARAMS))
        params = tuple((k, str(rng.randint(1, 512))) for k in INDEX_PARAMS[index] if rng.random() < 0.5)
        return DenseSpec(
            model=rng.choice(["minilm", "mpnet", "org/model-x", "/data/models/e5 base", "./m"]),
            max_seq_length=rng.choice([None, 128, 512]),
            query_prompt=rng.choice([None, "", "query: ", 'odd ,()="+@ prompt']),
            doc_prompt=rng.choice([None, "passage: "]),
            index=index,
            index_params=params,
            batch_size=rng.choice([32, 8]),
        )
    if kind == "hybrid":
        systems = tuple(_random_spec(rng, depth + 1) for _ in range(rng.randint(2, 3)))
        return HybridSpec(
            systems=systems,
            k=rng.choice([60, 0, 10]),
            weights=rng.choice([(), tuple(rng.choice([1, 0.5, 2]) for _ in systems)]),
            depth=rng.choice([None, 200]),
        )
    return RerankSpec(
        model=rng.choice(["minilm", "cross-encoder/x"]),
        first_stage=_random_spec(rng, depth + 1),
        top=rng.choice([100, 20]),
    )


def test_generated_specs_round_trip() -> None:
    """Property: for any spec, parse(str(spec)) == spec and str is a fixed point."""
    rng = random.Random(20261122)
    specs: dict[str, object] = {}
    slugs: dict[str, str] = {}
    for _ in range(600):
        spec = _random_spec(rng)
        text = str(spec)
        again = parse_system(text)
        assert again == spec, text
        assert str(again) == text
        assert specs.setdefault(text, spec) == spec  # one spec per canonical string
        assert slugs.setdefault(spec.slug, text) == text  # one canonical string per slug
    assert len(specs) > 300


@pytest.mark.parametrize(
    ("text", "error", "fragment"),
    [
        ("", InputError, "empty system spec"),
        ("bm26", UnknownNameError, "unknown system kind 'bm26'"),
        ("sparse:x", UnknownNameError, "valid kinds: bm25, dense, hybrid, rerank"),
        ("bm25:k1=x", InputError, "k1='x' must be a finite number"),
        ("bm25:k1=-1", InputError, "k1='-1'"),
        ("bm25:b=1.5", InputError, "b=1.5 must lie in [0, 1]"),
        ("bm25:k1=nan", InputError, "finite"),
        ("bm25:foo=1", UnknownNameError, "unknown bm25 option 'foo'"),
        ("bm25:k1", InputError, "is not key=value"),
        ("bm25:k1=1,k1=2", InputError, "given twice"),
        ("bm25:method=okapi", UnknownNameError, "unknown method 'okapi' for backend=bm25s"),
        ("bm25:backend=lucene", UnknownNameError, "unknown backend 'lucene'"),
        ("bm25:stemmer=porter", UnknownNameError, "unknown stemmer 'porter'"),
        ("bm25(k1=1):b=0.5", InputError, "either in parentheses or after ':'"),
        ("bm25+dense:minilm", InputError, "hybrid:bm25+dense:minilm"),
        ("dense", InputError, "dense needs a body"),
        ("dense:", InputError, "dense needs a body"),
        ("dense:minilm?max_seq_length=128", InputError, "options go in parentheses"),
        ("dense(index=annoy):minilm", UnknownNameError, "unknown index 'annoy'"),
        ("dense(index=hnsw,nlist=8):minilm", UnknownNameError, "unknown dense (index=hnsw) option 'nlist'"),
        ("dense(M=8):minilm", UnknownNameError, "unknown dense (index=flat) option 'M'"),
        ("dense(max_seq_length=0):minilm", InputError, "max_seq_length='0'"),
        ("dense(batch_size=1.5):minilm", InputError, "batch_size"),
        ('dense(query_prompt="open):minilm', InputError, "unterminated quoted value"),
        ("dense(max_seq_length=128:minilm", InputError, "unbalanced '('"),
        ("hybrid:bm25", InputError, "two or more systems, got 1"),
        ("hybrid(weights=1:2:3):bm25+dense:minilm", InputError, "weights has 3 values for 2 systems"),
        ("hybrid(weights=a:b):bm25+dense:minilm", InputError, "weights"),
        ("hybrid(weights=0:0):bm25+dense:minilm", InputError, "all zero"),
        ("hybrid(k=-1):bm25+dense:minilm", InputError, "k='-1'"),
        ("hybrid(alpha=0.5):bm25+dense:minilm", UnknownNameError, "unknown hybrid option 'alpha'"),
        ("hybrid:bm25+sparse:x", UnknownNameError, "unknown system kind"),
        ("hybrid:(bm25+dense:minilm", InputError, "unbalanced"),
        ("rerank:minilm", InputError, "rerank needs <model>@<system>"),
        ("rerank:minilm@", InputError, "rerank needs <model>@<system>"),
        ("rerank:@bm25", InputError, "bad model name"),
        ("rerank(top=0):minilm@bm25", InputError, "top='0'"),
        ("rerank(n=5):minilm@bm25", UnknownNameError, "unknown rerank option 'n'"),
        ("rerank:minilm@bm25+dense:minilm", InputError, "hybrid:"),
    ],
)
def test_invalid_specs_explain_the_grammar(text: str, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as info:
        parse_system(text)
    message = str(info.value)
    assert fragment in message
    assert f"system spec {text!r}" in message or not text
    for example in (
        "valid system specs",
        "bm25:k1=1.2,b=0.75",
        "dense:minilm",
        "hybrid:bm25+dense:minilm",
        "rerank:cross-encoder/ms-marco-MiniLM-L-6-v2@bm25",
        "rerank(top=50)",
    ):
        assert example in message


def test_direct_construction_is_validated() -> None:
    with pytest.raises(UnknownNameError):
        DenseSpec("minilm", index="hnsw", index_params=(("nlist", "3"),))
    with pytest.raises(InputError):
        HybridSpec(systems=(BM25Spec(),))
    with pytest.raises(InputError):
        RerankSpec(model="minilm", first_stage="bm25")  # type: ignore[arg-type]


def test_slugs_are_safe_readable_and_distinct() -> None:
    specs = [parse_system(t) for t in VALID] + [parse_system("dense:a/b"), parse_system("dense:a_b")]
    slugs = {str(s): s.slug for s in specs}
    assert parse_system("bm25").slug == "bm25"
    for slug in slugs.values():
        assert re.fullmatch(r"[A-Za-z0-9.,=+@_-]{1,120}", slug), slug
        assert not slug.startswith(("-", "."))
    assert len(set(slugs.values())) == len(slugs)
    assert parse_system("bm25:k1=1.2").slug.startswith("bm25_k1=1.2-")


def test_importing_systems_loads_no_heavy_library() -> None:
    code = (
        "import sys, irflow.tasks.systems.specs, irflow.tasks.core.runs; "
        "heavy = {'bm25s', 'Stemmer', 'faiss', 'torch', "
        "'sentence_transformers', 'rank_bm25'} & set(sys.modules); print(sorted(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_walk_visits_every_system_once_parents_first_and_leaves_are_the_first_stages():
    spec = parse_system("rerank:minilm@hybrid:bm25+(hybrid:dense:minilm+bm25:k1=1.2)")
    kinds = [node.kind for node in walk(spec)]
    assert kinds == ["rerank", "hybrid", "bm25", "hybrid", "dense", "bm25"]
    first_stages = ["bm25", "dense:sentence-transformers/all-MiniLM-L6-v2", "bm25:k1=1.2"]
    assert [str(leaf) for leaf in leaves(spec)] == first_stages
    assert list(walk(parse_system("bm25"))) == [parse_system("bm25")]
