"""Query logs → query sets (``--format querylog``): simulated logs with known frequencies, written to
real files, must normalise and de-duplicate as documented, sample in proportion to searches (or per
stratum), draw the same set for the same seed, fail naming file, row and field, and give a dataset
that evaluates with a report segmented by the queries' ``source``."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from support.cli import irflow

from irflow.tasks import ingest
from irflow.tasks.compare import analysis
from irflow.tasks.core.schema import InputError
from irflow.tasks.ingest.querylog import (
    Sampling,
    allocate,
    distinct_queries,
    draw_keys,
    frequency_bands,
    normalise,
    query_id,
    query_set,
    read_query_log,
    sample_queries,
)


def population(counts: dict[str, int], category: dict[str, str] | None = None) -> pd.DataFrame:
    """A log with one row per search (``count`` rows of each query), shuffled, as ``read_query_log`` reads it."""
    rows = [(q, category.get(q, "") if category else "") for q, n in counts.items() for _ in range(n)]
    frame = pd.DataFrame(rows, columns=["query", "category"]).sample(frac=1.0, random_state=0)
    return frame.reset_index(drop=True)


def write_log(frame: pd.DataFrame, path: Path) -> Path:
    if path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    elif path.suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    else:
        frame.to_csv(path, index=False, sep="\t" if path.suffix == ".tsv" else ",")
    return path


def table_of(tmp_path: Path, frame: pd.DataFrame, name: str = "log.csv") -> pd.DataFrame:
    return distinct_queries(read_query_log(write_log(frame, tmp_path / name)))


def draw(table: pd.DataFrame, **options: object) -> pd.DataFrame:
    sampling = Sampling(**options)  # type: ignore[arg-type]
    return sample_queries(table, draw_keys(table, sampling), sampling)[0]


# ----------------------------------------------------------------------------- normalise, de-duplicate


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_spellings_merge_counts_sum_and_the_most_searched_spelling_and_label_win(tmp_path: Path, suffix: str):
    rows = [
        ("Reset  Password", 2, "account", "2024-05-01T08:00:00Z"),
        ("reset password", 5, "account", "2024-05-01T09:00:00+02:00"),
        ("ＲＥＳＥＴ password ", 1, "billing", "2024-05-02"),  # fullwidth letters: NFKC makes them ASCII
        ("Straße kaufen", 1, "", "2024-05-02"),
        ("STRASSE KAUFEN", 1, "shop", "2024-05-03"),  # casefold: ß = ss
        ("   ", 4, "account", "2024-05-03"),  # empty: dropped, counted
        ("reset password", 1, "billing", "2024-05-04"),
    ]
    log = pd.DataFrame(rows, columns=["query", "count", "category", "timestamp"])
    path = write_log(log, tmp_path / f"log{suffix}")
    table = distinct_queries(read_query_log(path)).set_index("key")
    assert normalise("ＲＥＳＥＴ\u00a0 Password ") == "reset password" and normalise("Straße") == "strasse"
    assert sorted(table.index) == ["reset password", "strasse kaufen"]
    reset = table.loc["reset password"]
    assert reset["count"] == 9 and reset["text"] == "reset password"  # 6 searches as typed, 2 and 1 otherwise
    assert reset["category"] == "account"  # 7 searches labelled account, 2 billing
    shop = table.loc["strasse kaufen"]
    assert shop["count"] == 2 and shop["text"] == "Straße kaufen"  # a tie: the first spelling in the file
    assert shop["category"] == "shop" and shop["length"] == "1-2 words"  # an empty label is no label

    sample, summary = query_set(path, Sampling())
    assert summary["rows"] == 7 and summary["empty_queries"] == 1 and summary["searches"] == 15
    assert summary["distinct_queries"] == 2 and summary["merged_spellings"] == 3
    assert summary["first_search"] == "2024-05-01T07:00:00+00:00"  # +02:00 read in UTC
    window, summary = query_set(path, Sampling(since="2024-05-02", until="2024-05-04"))
    assert summary["outside_window"] == 3 and dict(zip(window["key"], window["count"])) == {
        "reset password": 1,
        "strasse kaufen": 2,
    }


def test_frequency_bands_split_the_searches_in_thirds_and_equal_counts_share_a_band() -> None:
    assert frequency_bands(np.array([60, 20, 10, 5, 5])).tolist() == ["head", "torso", "tail", "tail", "tail"]
    counts = np.array([40, 15, 15] + [1] * 30)  # the 15s begin at 40 %, the ones at 70 % of the searches
    assert frequency_bands(counts).tolist() == ["head", "torso", "torso"] + ["tail"] * 30
    assert set(frequency_bands(np.ones(9))) == {"torso"}  # no frequency signal: the middle one's place


def test_difficulty_comes_from_the_log_when_it_has_one_and_segments_keep_its_order(tmp_path: Path) -> None:
    log = pd.DataFrame({"query": ["a b", "c d", "e f"], "count": [1, 1, 1], "difficulty": ["hard", "easy", ""]})
    table = table_of(tmp_path, log)
    assert table["difficulty"].tolist() == ["hard", "easy", ""]
    derived = table_of(tmp_path, population({"a": 60, "b": 20, "c": 10, "d": 5}), "derived.csv")
    assert dict(zip(derived["key"], derived["difficulty"])) == {"a": "head", "b": "torso", "c": "tail", "d": "tail"}
    queries = pd.DataFrame(
        {"query_id": ["1", "2", "3", "4"], "text": "x", "difficulty": ["tail", "head", "tail", "torso"]}
    )
    per_query = pd.DataFrame({"system": "s", "query_id": ["1", "2", "3", "4"], "metric": "m", "value": 1.0})
    assert analysis.segments(per_query, queries, "difficulty", "m")["difficulty"].tolist() == ["head", "torso", "tail"]


# ----------------------------------------------------------------------------- sampling


def test_each_query_is_drawn_in_proportion_to_its_searches(tmp_path: Path) -> None:
    counts = {"alpha": 1, "beta": 2, "gamma": 3, "delta": 4}
    table = table_of(tmp_path, population(counts))
    seeds = 4000  # chi-square at alpha 1e-4: a correct sampler fails for one choice of seeds in 10,000
    drawn = pd.Series([draw(table, size=1, seed=s)["key"].iloc[0] for s in range(seeds)]).value_counts()
    observed = [int(drawn.get(q, 0)) for q in counts]
    expected = [seeds * n / 10 for n in counts.values()]
    assert stats.chisquare(observed, expected).pvalue > 1e-4, observed
    uniform = pd.Series([draw(table, size=1, seed=s, strategy="uniform")["key"].iloc[0] for s in range(seeds)])
    observed = [int(uniform.value_counts().get(q, 0)) for q in counts]
    assert stats.chisquare(observed, expected).pvalue < 1e-12  # the test tells weighted from uniform
    assert stats.chisquare(observed, [seeds / 4] * 4).pvalue > 1e-4, observed


def test_frequent_queries_fill_the_sample_as_they_fill_the_log(tmp_path: Path) -> None:
    """1,000 queries searched 9 times and 9,000 searched once: each half of the 18,000 searches. A
    sample of 20 (too small to deplete the frequent ones: at most 180 of 18,000 searches) holds about
    half frequent queries; over 200 seeds the mean share has a standard error of 0.008."""
    log = pd.DataFrame({"query": [f"q{i}" for i in range(10_000)], "count": [9] * 1_000 + [1] * 9_000})
    table = table_of(tmp_path, log)
    frequent = {f"q{i}" for i in range(1_000)}

    def share(**options: object) -> float:
        shares = [draw(table, size=20, seed=s, **options)["key"].isin(frequent).mean() for s in range(200)]
        return float(np.mean(shares))

    assert abs(share() - 0.5) < 0.035
    assert abs(share(strategy="uniform") - 0.1) < 0.03


def test_stratified_samples_keep_each_categorys_share(tmp_path: Path) -> None:
    """billing 500 searches over 100 queries, search 300 over 200, account 200 over 50: a frequency
    sample keeps the shares of searches (50/30/20), a uniform one those of queries (100/200/50 of 350)."""
    counts, category = {}, {}
    for name, queries, searches in (("billing", 100, 500), ("search", 200, 300), ("account", 50, 200)):
        for i in range(queries):
            text = f"{name} {i}" if i % 2 == 0 else f"{name} {i} with more words"  # 2 or 5 words, half each
            counts[text] = searches // queries + (1 if i < searches % queries else 0)
            category[text] = name
    table = table_of(tmp_path, population(counts, category))
    for seed in range(3):
        by_searches = draw(table, size=100, seed=seed, stratify=("category",))
        assert by_searches["category"].value_counts().to_dict() == {"billing": 50, "search": 30, "account": 20}
        by_queries = draw(table, size=100, seed=seed, stratify=("category",), strategy="uniform")
        assert by_queries["category"].value_counts().to_dict() == {"search": 57, "billing": 29, "account": 14}
    plain = [draw(table, size=100, seed=s)["category"].value_counts().get("account", 0) for s in range(20)]
    assert len(set(plain)) > 1  # without strata the share varies from seed to seed
    both = draw(table, size=60, seed=0, stratify=("category", "length"))  # searches 250/250, 150/150, 100/100
    assert both.groupby(["category", "length"]).size().to_dict() == {
        ("account", "1-2 words"): 6,
        ("account", "3-5 words"): 6,
        ("billing", "1-2 words"): 15,
        ("billing", "3-5 words"): 15,
        ("search", "1-2 words"): 9,
        ("search", "3-5 words"): 9,
    }


def test_allocation_is_largest_remainder_and_a_small_stratum_passes_on_what_it_cannot_take() -> None:
    assert allocate(np.array([5.0, 3.0, 2.0]), np.array([99, 99, 99]), 7).tolist() == [4, 2, 1]
    assert allocate(np.array([90.0, 5.0, 5.0]), np.array([10, 100, 100]), 50).tolist() == [10, 20, 20]
    assert allocate(np.array([1.0, 1.0]), np.array([3, 2]), 99).tolist() == [3, 2]


def test_the_same_seed_draws_the_same_ids_whatever_the_row_order(tmp_path: Path) -> None:
    counts = {f"how to fix error {i}": 1 + (i * 7) % 13 for i in range(300)}
    log = population(counts)
    first = write_log(log, tmp_path / "a.csv")
    shuffled = write_log(log.sample(frac=1.0, random_state=5), tmp_path / "b.jsonl")
    imports = {}
    for name, path, seed in (("a", first, 1), ("b", shuffled, 1), ("c", first, 2)):
        manifest = ingest.import_dataset(path, "querylog", name, base="techdocs", sampling=Sampling(size=40, seed=seed))
        imports[name] = (ingest.load_dataset(name).queries["query_id"].tolist(), manifest["fingerprint"])
    assert imports["a"] == imports["b"] and len(imports["a"][0]) == 40
    assert set(imports["a"][0]) <= {query_id(normalise(q)) for q in counts}  # no techdocs query: all log-<digest>
    assert set(imports["a"][0]) != set(imports["c"][0])
    table = table_of(tmp_path, log)
    small, large = draw(table, size=20, seed=9), draw(table, size=60, seed=9)
    assert set(small["key"]) < set(large["key"])  # a larger sample extends a smaller one
    raised, summary = query_set(first, Sampling(size=20, seed=9, min_count=5))
    order = table.iloc[np.argsort(draw_keys(table, Sampling(seed=9)))]
    assert set(raised["key"]) == set(order[order["count"] >= 5]["key"][:20])  # the others keep their order
    assert summary["below_min_count"] == (table["count"] < 5).sum() > 0


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("a.csv", "", r"query log is empty"),
        ("a.csv", "query,count\n", r"query log is empty; expected at least one query"),
        ("a.csv", "q,count\nhello,1\n", r"query log lacks a query column \(query or text\); columns: q, count"),
        (
            "a.csv",
            "query,count\nhello,1\nworld,x\n",
            r"row 2: field 'count' is 'x'; expected an integer from 1 to 2\*\*63-1",
        ),
        ("a.csv", "query,count\nhello,0\n", r"row 1: field 'count' is '0'; expected an integer from 1"),
        ("a.jsonl", '{"query": "a", "count": 1}\n{"query": "b", "count": "many"}\n', r"row 2: field 'count'"),
        (
            "a.tsv",
            "query\ttimestamp\nhello\t2024-05-01\nworld\tyesterday\n",
            r"row 2: field 'timestamp' is 'yesterday'; expected an ISO 8601 date or time",
        ),
        ("a.csv", "query,source\nhello,web\n", r"row 1: field 'source' is 'web'; expected one of production"),
        ("a.csv", 'query,count\n"  ",1\n', r"no non-empty query is left"),
        ("a.xlsx", "x", r"unknown query log format '\.xlsx'"),
        (
            "a.csv",
            f"query,count\nhello,2\nworld,{10**30}\n",
            rf"row 2: field 'count' is '1{'0' * 30}'; expected an integer",
        ),
        ("a.csv", f"query,count\nhello,{2**63}\n", r"row 1: field 'count' is '9223372036854775808'"),
        ("a.csv", f"query,count\nhello,{2**62}\nworld,{2**62}\n", r"row 2: the count values up to this row add up"),
        (
            "a.jsonl",
            '{"query": "a"}\n{"query": "b\\ud800c"}\n',
            r"a.jsonl:2: field 'query' holds a lone surrogate U\+D800",
        ),
        (
            "a.jsonl",
            '{"query": "a", "category": "x\\udfff"}\n',
            r"a.jsonl:1: field 'category' holds a lone surrogate U\+DFFF",
        ),
    ],
)
def test_bad_logs_fail_naming_file_row_and_field(tmp_path: Path, name: str, content: str, match: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=match) as error:
        query_set(path, Sampling())
    assert re.match(rf"{re.escape(str(path))}:(\d+:)? ", str(error.value))


@pytest.mark.parametrize(
    "sampling, match",
    [
        (Sampling(size=0), r"--sample must be >= 1"),
        (Sampling(stratify=("category", "colour")), r"--stratify takes distinct labels from category"),
        (Sampling(source="web"), r"--source must be one of production, synthetic, expert, click"),
        (Sampling(since="last week"), r"--since expects an ISO 8601 date or time"),
        (Sampling(since="2024-06-01", until="2024-05-01"), r"--since 2024-06-01 is not before --until"),
        (Sampling(stratify=("segment",)), r"cannot stratify by 'segment': the query log has no segment column"),
        (Sampling(until="2024-05-01"), r"--since/--until need a timestamp column"),
        (Sampling(min_count=3), r"no query was searched at least 3 times"),
    ],
)
def test_bad_options_fail_naming_the_option(tmp_path: Path, sampling: Sampling, match: str) -> None:
    path = write_log(pd.DataFrame({"query": ["a", "b", "a"], "category": ["x", "y", "x"]}), tmp_path / "log.csv")
    with pytest.raises(InputError, match=match):
        query_set(path, sampling)


@pytest.mark.e2e
def test_a_querylog_needs_a_base_and_its_options_only_fit_it(tmp_path: Path) -> None:
    path = write_log(pd.DataFrame({"query": ["a"]}), tmp_path / "log.csv")
    with pytest.raises(InputError, match="--format querylog needs --base NAME"):
        ingest.import_dataset(path, "querylog", "x")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = irflow("datasets", "import", str(path), "--format", "clicks", "--dataset", "techdocs", "--name", "x",
                  "--sample", "5", "--seed", "1", env=env)  # fmt: skip
    assert done.returncode == 2 and "--sample, --seed: only for --format querylog" in done.stderr


# ----------------------------------------------------------------------------- end to end


@pytest.mark.e2e
def test_import_against_techdocs_and_evaluate_bm25_segmented_by_source(tmp_path: Path) -> None:
    """40 techdocs queries (respelled, production and expert traffic) among 60 new ones: the sampled set
    keeps techdocs' judgements for the queries it shares, stores the others unjudged, and `irflow run`
    evaluates the judged ones with a report segmented by source and by frequency band."""
    techdocs = ingest.load_dataset("techdocs")
    rng = np.random.default_rng(7)
    rows = []
    for i, text in enumerate(techdocs.queries["text"][:40]):
        source = "expert" if i % 3 == 0 else ""  # blank: the import's default, production
        for spelling in (text, f"  {text.upper()} "):
            rows.append((spelling, int(rng.integers(1, 30)), source, "2024-05-01T10:00:00Z"))
    rows += [(f"quiver question number {i}", int(rng.integers(1, 4)), "", "2024-05-02") for i in range(60)]
    path = write_log(pd.DataFrame(rows, columns=["query", "count", "source", "timestamp"]), tmp_path / "log.csv")

    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "HF_HUB_OFFLINE": "1"}
    args = ["datasets", "import", str(path), "--format", "querylog", "--dataset", "techdocs", "--name", "traffic"]
    done = irflow(*args, "--sample", "70", "--seed", "3", "--stratify", "source", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    dataset = ingest.load_dataset("traffic")
    queries = dataset.queries.set_index("query_id")
    shared = queries.index[queries.index.str.startswith("td-q-")]
    assert len(queries) == 70 and len(shared) > 0 and queries.index.str.startswith("log-").sum() == 70 - len(shared)
    assert set(dataset.qrels["query_id"]) == set(shared)
    expected_qrels = techdocs.qrels[techdocs.qrels["query_id"].isin(shared)]
    assert len(dataset.qrels) == len(expected_qrels)
    assert set(queries["source"]) == {"production", "expert"} and set(queries["difficulty"]) <= {
        "head",
        "torso",
        "tail",
    }
    manifest = dataset.manifest
    assert manifest["queries"] == len(shared) and manifest["unjudged_queries"] == 70 - len(shared)
    assert {"source", "count", "length", "difficulty"} <= set(manifest["query_metadata"])
    assert "query set: 70 of 100 distinct queries" in done.stdout and "irflow pool --dataset traffic" in done.stdout

    out = tmp_path / "out"
    done = irflow(
        "run", "--dataset", "traffic", "--system", "bm25", "--latency-runs", "0", "--output", str(out), env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads((out / "metrics.json").read_text())
    assert document["dataset"]["queries"] == len(shared)
    per_query = pd.read_parquet(out / "per_query.parquet")
    ndcg = per_query[per_query["metric"] == "nDCG@10"].set_index("query_id")["value"]
    assert set(ndcg.index) == set(shared)
    report = (out / "report.md").read_text(encoding="utf-8")
    section = report.split("### By source", 1)[1].split("###", 1)[0]
    for source, group in queries.loc[shared].groupby("source"):
        row = re.search(rf"^\| {source} \| (\d+)[^|]* \| \**([0-9.]+)\**", section, re.MULTILINE)
        assert row is not None, section
        assert int(row.group(1)) == len(group)
        assert float(row.group(2)) == pytest.approx(ndcg[group.index].mean(), abs=5e-5)
    assert "### By difficulty" in report and "### By count" not in report  # a number with many values is no segment
