"""Issue 52: numbers that are not numbers. NaN, infinite and absurd search options are refused by the library's own
option check (so the CLI, Python and the service say the same line), and no `--json` output ever holds NaN or
Infinity: every command writes through one strict writer (capr.cli.common.write_json), and the suite parses every
`--json` output it runs strictly (conftest: capr_cli / capr_in_process); the searches below are its sample of the
search options a user reaches for."""

from __future__ import annotations

import math

import pytest

from capr.errors import QueryError
from capr.index import build_index, load_index
from capr.records import Document, Query
from capr.search.searcher import SearchOptions, search

from conftest import capr_cli, capr_in_process, one_line_error, strict_json


@pytest.fixture(scope="module")
def notes(tmp_path_factory):
    root = tmp_path_factory.mktemp("numbers") / "idx"
    docs = [Document("n1", "Cardiology note", "Assessment: atrial fibrillation.\n\nPlan: apixaban 5 mg twice daily.",
                     metadata={"patient": "p1", "date": "2150-01-05"}),
            Document("n2", "Clinic note", "History: asthma since childhood.\n\nPlan: inhaler as needed.",
                     metadata={"patient": "p2", "date": "2150-02-01T08:00"})]
    build_index(docs, root).close()
    return root


@pytest.mark.parametrize("options, needle", [
    ({"aspect_boost": math.nan}, "aspect_boost must be a number from 0 to 1000, got nan"),
    ({"aspect_boost": math.inf}, "aspect_boost must be a number from 0 to 1000, got inf"),
    ({"mention_boost": -math.inf}, "mention_boost must be a number from 0 to 1000, got -inf"),
    ({"k": 1e20}, "k must be a whole number from 1 to 1,000,000, got 1e+20"),
    ({"k": 10 ** 20}, "k must be a whole number from 1 to 1,000,000, got 1e+20"),
    ({"k": 2.5}, "k must be a whole number"),
    ({"rerank_share": math.nan}, "rerank_share must be between 0 and 1, got nan"),
    ({"thetas": (math.nan, 0.4)}, "thetas must be between 0 and 1, got nan"),
])
def test_python_api_refuses_numbers_that_are_not_numbers(notes, options, needle):
    with pytest.raises(QueryError) as e:
        search(load_index(notes), Query("q", entity="atrial fibrillation", aspect="plan"), **options)
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert e.value.field == next(iter(options))  # the service names the field at fault
    assert SearchOptions(k=3.0).k == 3  # a whole number written as a float is that number


@pytest.mark.parametrize("args, needle", [
    (("--aspect-boost", "nan"), "aspect_boost must be a number from 0 to 1000, got nan"),
    (("--aspect-boost", "inf"), "aspect_boost must be a number from 0 to 1000, got inf"),
    (("--aspect-boost", "1e308"), "aspect_boost must be a number from 0 to 1000, got 1e+308"),
    (("-k", "100000000000000000000"), "k must be a whole number from 1 to 1,000,000"),
])
def test_cli_refuses_them_in_one_line(notes, runner, args, needle):
    proc = capr_in_process(runner, "search", str(notes), "-e", "atrial fibrillation", "-a", "plan", "--json", *args,
                           check=False)
    one_line_error(proc, needle)
    assert proc.returncode == 2 and not proc.stdout.strip()


def test_every_search_a_user_reaches_for_prints_strict_json(notes):
    """The real command, with the options that move scores most (boosts at their bounds, evidence, grouping, filters
    that keep one note or none): each output parses with a parser that refuses NaN and Infinity."""
    base = ("search", str(notes), "--json")
    runs = [("atrial fibrillation apixaban",), ("-e", "atrial fibrillation", "-a", "plan", "--aspect-boost", "1000"),
            ("-e", "asthma", "--aspect-boost", "0", "--evidence", "lexical", "-k", "1"),
            ("inhaler", "--group-by", "doc", "--filter", "date>=2150-02"),
            ("inhaler", "--filter", "date<2150-01", "-r", "tfidf"), ("-a", "plan", "--no-entity-first")]
    for extra in runs:
        proc = capr_cli(*base, *extra, check=False)
        assert proc.returncode == 0, (extra, proc.stderr)
        [payload] = strict_json(proc.stdout)
        assert all(math.isfinite(r["score"]) for r in payload["results"]), extra


def test_the_strict_parser_refuses_nan_and_infinity():
    for text in ('{"score": NaN}', '{"score": Infinity}', '[-Infinity]'):
        with pytest.raises(AssertionError, match="is not JSON"):
            strict_json(text)
    assert strict_json('{"a": 1}\n{"b": 2}\n') == [{"a": 1}, {"b": 2}]
