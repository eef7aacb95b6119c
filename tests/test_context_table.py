"""The batch-size x context table (vLLM RFC #48627, PRs #48944 / #54801): parsing, lookup, equivalence."""

import numpy as np
import pytest

from banditk.core.errors import ConfigError, InvalidContextError
from banditk.core.types import StepContext
from banditk.policies import ContextTablePolicy, make_policy
from banditk.policies.static import CTX_UNBOUNDED, TablePolicy, ctx_table_k, parse_ctx_table, table_k

RFC_TABLE = "[[1,64,0,32768,3],[65,256,0,768,0],[65,256,769,32768,3],[257,512,0,32768,0]]"


def ctx(n, mean_ctx, *, scheduled=None, k_max=4):
    return StepContext(
        n, k_max, "mtp", num_scheduled=n if scheduled is None else scheduled, context_tokens=n * mean_ctx
    )


def test_parses_five_and_three_item_rows():
    assert parse_ctx_table("[[1,4,0,100,2],[1,4,101,200,1],[5,8,3]]", k_max=4) == [
        (1, 4, 0, 100, 2),
        (1, 4, 101, 200, 1),
        (5, 8, 0, CTX_UNBOUNDED, 3),
    ]
    assert parse_ctx_table([[1, 512, 0, 10, 0]], k_max=0) == [(1, 512, 0, 10, 0)]


@pytest.mark.parametrize(
    "spec,pattern",
    [
        ("nope", r"table-ctx spec must be JSON like"),
        ("[]", r"non-empty list"),
        ("{}", r"non-empty list"),
        ("[[1,4,0,9]]", r"5 items\) or \[bs_lo, bs_hi, K\] \(3 items, every context\), got \[1, 4, 0, 9\]"),
        ("[[1,4,0,9,2,7]]", r"got \[1, 4, 0, 9, 2, 7\]"),
        ("[5]", r"table-ctx row must be .* got 5"),
        ("[[1,4,0,9,5]]", r"`K` must be in \[0, k_max=4\], got 5"),
        ("[[1,4,0,9,-1]]", r"`K` must be >= 0, got -1"),
        ("[[1,4,-1,9,2]]", r"`ctx_lo` must be >= 0, got -1"),
        ("[[1,4,0,-9,2]]", r"`ctx_hi` must be >= 0, got -9"),
        ("[[-1,4,0,9,2]]", r"`bs_lo` must be >= 0, got -1"),
        ("[[0,4,0,9,2]]", r"`bs_lo` must be >= 1, got 0"),
        ("[[4,1,0,9,2]]", r"`bs_lo` must be <= `bs_hi`, got 4 > 1"),
        ("[[1,4,9,0,2]]", r"`ctx_lo` must be <= `ctx_hi`, got 9 > 0"),
        ("[[1,4,0,9,2.0]]", r"`K` must be an integer, got 2.0"),
        ("[[1,4,0.5,9,2]]", r"`ctx_lo` must be an integer, got 0.5"),
        ('[[1,"4",0,9,2]]', r"`bs_hi` must be an integer, got '4'"),
        ("[[1,4,0,true,2]]", r"`ctx_hi` must be an integer, got True"),
        ("[[2,4,0,9,2]]", r"must start at batch size 1"),
        ("[[1,4,0,9,2],[3,8,0,9,1]]", r"batch ranges must be sorted and non-overlapping.*got \[3, 8, 0, 9, 1\]"),
        ("[[5,8,0,9,2],[1,4,0,9,1]]", r"batch ranges must be sorted"),
        ("[[1,4,0,9,2],[1,4,9,20,1]]", r"context ranges of batch range \[1, 4\] must be sorted.*\[1, 4, 9, 20, 1\]"),
        ("[[1,4,10,20,2],[1,4,0,9,1]]", r"context ranges of batch range \[1, 4\] must be sorted"),
        ("[[1,4,0,9,2],[1,4,0,9,1]]", r"context ranges of batch range \[1, 4\] must be sorted"),
        ("[[1,4,0,9,2],[1,4,3]]", r"context ranges of batch range \[1, 4\] must be sorted"),
    ],
)
def test_bad_tables_are_refused_naming_field_and_value(spec, pattern):
    with pytest.raises(ConfigError, match=pattern):
        parse_ctx_table(spec, k_max=4)
    with pytest.raises(ConfigError, match=pattern):
        make_policy("table-ctx:" + spec, k_max=4, drafter_class="mtp")


def test_ranges_are_inclusive_at_both_edges():
    p = ContextTablePolicy(RFC_TABLE, k_max=4)
    # batch edges 64 | 65 and 256 | 257, context edges 768 | 769
    assert p.k_for(64, 100) == 3 and p.k_for(65, 100) == 0
    assert p.k_for(65, 768) == 0 and p.k_for(65, 769) == 3
    assert p.k_for(256, 768) == 0 and p.k_for(256, 769) == 3
    assert p.k_for(257, 769) == 0 and p.k_for(512, 32768) == 0
    assert p.k_for(1, 0) == 3 and p.k_for(1, 32768) == 3


def test_select_uses_scheduled_batch_and_floored_mean_context():
    p = ContextTablePolicy(RFC_TABLE, k_max=4)
    assert p.select(ctx(100, 768)).k == 0
    assert p.select(ctx(100, 769)).k == 3
    # sum 100*769 - 1 floors to a mean of 768
    assert p.select(StepContext(100, 4, "mtp", context_tokens=100 * 769 - 1)).k == 0
    # prefills count in the batch size, as in TablePolicy: 60 decoding, 70 scheduled
    assert p.select(ctx(60, 100, scheduled=70)).k == 0
    assert p.select(ctx(60, 100, scheduled=60)).k == 3
    # but the mean context is over the decoding requests only
    assert p.select(StepContext(60, 4, "mtp", num_scheduled=70, context_tokens=60 * 800)).k == 3


def test_no_match_carries_forward_on_both_axes():
    t = parse_ctx_table("[[1,4,100,200,2],[1,4,300,400,1],[8,16,0,50,4],[8,16,60,70,3]]", k_max=4)
    assert ctx_table_k(t, 2, 0, k_max=4) == 2  # below the first context range: first row
    assert ctx_table_k(t, 2, 250, k_max=4) == 2  # context gap: previous row
    assert ctx_table_k(t, 2, 10**9, k_max=4) == 1  # past the last context range: last row
    assert ctx_table_k(t, 6, 350, k_max=4) == 1  # batch gap 5..7: the 1..4 range carries forward
    assert ctx_table_k(t, 6, 10, k_max=4) == 2
    assert ctx_table_k(t, 10_000, 55, k_max=4) == 4  # past the last batch range, context gap 51..59
    assert ctx_table_k(t, 10_000, 65, k_max=4) == 3
    assert ctx_table_k(t, 10, 65, k_max=2) == 2  # capped at k_max


def test_unknown_or_empty_context_reads_as_zero():
    p = ContextTablePolicy("[[1,8,0,10,1],[1,8,11,100,2]]", k_max=4)
    assert p.select(StepContext(4, 4, "mtp")).k == 1
    assert p.select(StepContext(0, 4, "mtp", num_scheduled=3)).k == 1
    assert p.select(StepContext(0, 4, "mtp", num_scheduled=0)).k == 1


@pytest.mark.parametrize("rows", [[[1, 4, 2], [5, 512, 0]], [[1, 16, 3], [32, 128, 2]], [[1, 1, 4], [3, 3, 1]]])
@pytest.mark.parametrize("form", ["three", "covering", "partial"])
def test_equals_the_batch_table_when_every_row_covers_all_contexts(rows, form):
    if form == "three":
        ctx_rows = rows
    elif form == "covering":
        ctx_rows = [[lo, hi, 0, 10**9, k] for lo, hi, k in rows]
    else:  # a single context range per batch range covers every context by carry-forward
        ctx_rows = [[lo, hi, 500, 600, k] for lo, hi, k in rows]
    batch = TablePolicy(rows, k_max=4)
    both = ContextTablePolicy(ctx_rows, k_max=4)
    rng = np.random.default_rng(0)
    for _ in range(2000):
        n = int(rng.integers(0, 300))
        s = n + int(rng.integers(0, 20))
        c = StepContext(n, 4, "mtp", num_scheduled=s, context_tokens=n * int(rng.integers(0, 200_000)))
        assert both.select(c).k == batch.select(c).k == table_k(batch.table, max(s, 1), 4)


def test_make_policy_builds_it_and_the_name_round_trips():
    p = make_policy("table-ctx:" + RFC_TABLE, k_max=4, drafter_class="mtp")
    assert isinstance(p, ContextTablePolicy)
    assert p.name == "table-ctx:" + RFC_TABLE.replace(" ", "")
    assert make_policy(p.name, k_max=4, drafter_class="mtp").table == p.table
    q = make_policy("table-ctx:[[1, 4, 2], [5, 512, 0, 1000, 1]]", k_max=4, drafter_class="mtp")
    assert q.name == "table-ctx:[[1,4,2],[5,512,0,1000,1]]"
    assert q.disables_speculation is False
    assert q.observe(q.select(ctx(2, 10)), None) is None and q.steps == 1


def test_unknown_spec_error_lists_table_ctx():
    with pytest.raises(ConfigError, match=r"table-ctx:\[\[bs_lo,bs_hi,ctx_lo,ctx_hi,K\],...\]"):
        make_policy("table-ctxx", k_max=4, drafter_class="mtp")


def test_k_max_mismatch_is_refused():
    p = ContextTablePolicy(RFC_TABLE, k_max=4)
    with pytest.raises(InvalidContextError, match="k_max=3 but the table was built for k_max=4"):
        p.select(StepContext(4, 3, "mtp"))
