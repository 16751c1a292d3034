"""Knowledge-graph link prediction: relation scorers, the 1-N losses, the filter and filtered ranks."""
from __future__ import annotations

import pytest
import torch

from argosy.shared.errors import ConfigError
from argosy.shared.kg import (ComplEx, DistMult, RotatE, TripleFilter, filtered_ranks, kg_loss, kg_metrics,
                              make_kg_scorer, table_score_fn)

SCORERS = ["distmult", "complex", "rotate"]


def random_kg(n=30, r=4, m=200, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    tr = torch.stack([torch.randint(0, n, (m,), generator=g), torch.randint(0, r, (m,), generator=g),
                      torch.randint(0, n, (m,), generator=g)], 1)
    return torch.unique(tr, dim=0)


def brute_ranks(scores_tail, scores_head, triples, known):
    """Loop-per-triple reference: filtered mean-tie ranks from dense score tables [T, N]."""
    kset = {tuple(x) for x in known.tolist()}
    out = []
    for scores, side in ((scores_tail, "tail"), (scores_head, "head")):
        ranks = []
        for i, (h, r, t) in enumerate(triples.tolist()):
            target = t if side == "tail" else h
            s, st, greater, equal = scores[i], scores[i, target], 0, 0
            for e in range(scores.shape[1]):
                cand = (h, r, e) if side == "tail" else (e, r, t)
                if e == target or cand in kset:
                    continue
                greater += int(s[e] > st)
                equal += int(s[e] == st)
            ranks.append(1 + greater + equal / 2)
        out.append(torch.tensor(ranks, dtype=torch.float64))
    return out


# ---------------------------------------------------------------------------------------- scorers
@pytest.mark.parametrize("name", SCORERS)
@pytest.mark.parametrize("reciprocal", [True, False])
def test_one_to_n_scores_match_pairwise_scores(name, reciprocal):
    torch.manual_seed(0)
    s = make_kg_scorer(name, 3, 8, reciprocal=reciprocal)
    h, t, all_emb = torch.randn(5, 8), torch.randn(5, 8), torch.randn(7, 8)
    r = torch.tensor([0, 1, 2, 1, 0])
    tails = s.score_all_tails(h, r, all_emb)
    heads = s.score_all_heads(t, r, all_emb)
    assert tails.shape == heads.shape == (5, 7)
    for j in range(7):
        e = all_emb[j].expand(5, 8)
        assert torch.allclose(tails[:, j], s.score(h, r, e), atol=1e-5)
        if not reciprocal:                                          # heads through the closed form
            assert torch.allclose(heads[:, j], s.score(e, r, t), atol=1e-5)
    if reciprocal:                                                  # heads through relation r + R
        assert torch.allclose(heads, s.score_all_tails(t, r + 3, all_emb))


def test_complex_with_zero_imaginary_parts_is_distmult():
    torch.manual_seed(1)
    d = 6
    dm, cx = DistMult(4, d, reciprocal=False), ComplEx(4, 2 * d, reciprocal=False)
    with torch.no_grad():
        cx.rel.copy_(torch.cat([dm.rel, torch.zeros_like(dm.rel)], 1))
    real = lambda x: torch.cat([x, torch.zeros_like(x)], 1)  # noqa: E731
    h, t, all_emb, r = torch.randn(5, d), torch.randn(5, d), torch.randn(9, d), torch.tensor([0, 1, 2, 3, 3])
    assert torch.allclose(cx.score(real(h), r, real(t)), dm.score(h, r, t), atol=1e-6)
    assert torch.allclose(cx.score_all_tails(real(h), r, real(all_emb)), dm.score_all_tails(h, r, all_emb), atol=1e-6)
    assert torch.allclose(cx.score_all_heads(real(t), r, real(all_emb)), dm.score_all_heads(t, r, all_emb), atol=1e-6)


def test_complex_is_asymmetric_and_distmult_symmetric():
    torch.manual_seed(2)
    h, t, r = torch.randn(4, 8), torch.randn(4, 8), torch.tensor([0, 1, 0, 1])
    dm, cx = DistMult(2, 8), ComplEx(2, 8)
    assert torch.allclose(dm.score(h, r, t), dm.score(t, r, h))
    assert not torch.allclose(cx.score(h, r, t), cx.score(t, r, h))


def test_rotate_scores_a_rotation_highest():
    s = RotatE(1, 4, reciprocal=False, margin=0.0)
    h = torch.tensor([[1.0, 0.0, 0.0, 1.0]])                        # (1, i)
    with torch.no_grad():
        s.rel.copy_(torch.tensor([[torch.pi / 2, torch.pi / 2]]))   # multiply by i
    cand = torch.tensor([[0.0, -1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0]])  # (i, -1) and h itself
    sc = s.score_all_tails(h, torch.tensor([0]), cand)
    assert sc[0, 0].abs() < 1e-4 and sc[0, 1] < -1.0
    assert s.score_all_heads(cand[:1], torch.tensor([0]), h)[0, 0].abs() < 1e-4


def test_bad_arguments_name_the_value():
    with pytest.raises(ConfigError, match="even dim"):
        ComplEx(3, 7)
    with pytest.raises(ConfigError, match="got 'transe'"):
        make_kg_scorer("transe", 3, 8)
    with pytest.raises(ConfigError, match="KvsAll needs"):
        kg_loss(DistMult(2, 4), torch.randn(5, 4), torch.tensor([[0, 1, 2]]), "KvsAll")
    assert repr(ComplEx(3, 8)) == "ComplEx(3, 8, reciprocal=True)"


# ------------------------------------------------------------------------------- filter and ranks
def test_triple_filter_mask_is_the_known_set():
    tr = random_kg()
    f = TripleFilter(tr, 30, 4)
    kset = {tuple(x) for x in tr.tolist()}
    anchors, rels = torch.arange(30).repeat(4), torch.arange(4).repeat_interleave(30)
    mt, mh = f.mask(anchors, rels, "tail"), f.mask(anchors, rels, "head")
    for i, (a, r) in enumerate(zip(anchors.tolist(), rels.tolist())):
        assert {e for e in range(30) if mt[i, e]} == {t for h, rr, t in kset if (h, rr) == (a, r)}
        assert {e for e in range(30) if mh[i, e]} == {h for h, rr, t in kset if (t, rr) == (a, r)}


@pytest.mark.parametrize("ties", [False, True])
def test_filtered_ranks_match_a_loop_per_triple(ties):
    known = random_kg(seed=3)
    test = known[torch.randperm(len(known), generator=torch.Generator().manual_seed(0))[:40]]
    g = torch.Generator().manual_seed(1)
    table = {side: torch.randn(30, 4, 30, generator=g) for side in ("tail", "head")}  # [anchor, r, entity]
    if ties:
        table = {k: v.round() for k, v in table.items()}
    score_fn = lambda a, r, side: table[side][a, r]  # noqa: E731
    got = filtered_ranks(score_fn, test, known, 30, batch=7)
    want = brute_ranks(table["tail"][test[:, 0], test[:, 1]], table["head"][test[:, 2], test[:, 1]], test, known)
    assert torch.equal(got.tail, want[0]) and torch.equal(got.head, want[1])


def test_perfect_scorer_gets_mrr_one_and_filtering_keeps_the_test_triple():
    known = random_kg(n=20, r=3, m=150, seed=4)
    f = TripleFilter(known, 20, 3)
    perfect = lambda a, r, side: f.mask(a, r, side).float()  # noqa: E731  every true answer scores 1
    ranks = filtered_ranks(perfect, known, f, 20)
    assert kg_metrics(ranks) == {"mrr": 1.0, "hits@1": 1.0, "hits@3": 1.0, "hits@10": 1.0}
    # unfiltered, the other true answers tie with the target: the rank is 1 + (#other true) / 2
    raw = filtered_ranks(perfect, known, torch.zeros(0, 3, dtype=torch.int64), 20, num_relations=3)
    others = f.mask(known[:, 0], known[:, 1], "tail").sum(1) - 1
    assert torch.equal(raw.tail, 1.0 + others.double() / 2)
    # a scorer that puts every true answer last: the test triple is still ranked (never filtered
    # out), below every entity that is not a known answer
    worst = lambda a, r, side: -f.mask(a, r, side).float()  # noqa: E731
    assert torch.equal(filtered_ranks(worst, known, f, 20).tail, 20.0 - others.double())


def test_ties_count_as_the_mean_rank_and_both_sides_count():
    tr = torch.tensor([[0, 0, 1], [2, 0, 3]])
    flat = filtered_ranks(lambda a, r, side: torch.zeros(len(a), 10), tr, tr, 10)
    assert torch.equal(flat.tail, torch.full((2,), 5.5)) and torch.equal(flat.head, torch.full((2,), 5.5))

    answer = {"tail": {0: 1, 2: 3}, "head": {1: 0, 3: 2}}

    def tail_right_head_wrong(a, r, side):                          # the answer scores +1 as tail, -1 as head
        s = torch.zeros(len(a), 10)
        s[torch.arange(len(a)), [answer[side][x] for x in a.tolist()]] = 1.0 if side == "tail" else -1.0
        return s
    # (4, 0, 1) is also true: filtered out of the head query (?, 0, 1), whose rank is 9, not 10
    known = torch.cat([tr, torch.tensor([[4, 0, 1]])])
    ranks = filtered_ranks(tail_right_head_wrong, tr, known, 10)
    assert ranks.tail.tolist() == [1.0, 1.0] and ranks.head.tolist() == [9.0, 10.0]
    m = kg_metrics(ranks)
    assert m["mrr"] == pytest.approx((1.0 + 1.0 + 1 / 9 + 1 / 10) / 4)
    assert m["hits@1"] == 0.5 and m["hits@3"] == 0.5 and m["hits@10"] == 1.0


def test_table_score_fn_ranks_a_planted_model_first():
    torch.manual_seed(5)
    n = 12
    emb = torch.eye(n)                                              # r = identity: every entity's best tail is itself
    s = DistMult(1, n, reciprocal=False, init_std=0.0)
    with torch.no_grad():
        s.rel.fill_(1.0)
    tr = torch.stack([torch.arange(n), torch.zeros(n, dtype=torch.int64), torch.arange(n)], 1)
    assert kg_metrics(filtered_ranks(table_score_fn(s, emb), tr, tr, n))["mrr"] == 1.0


@pytest.mark.parametrize("mode", ["1vsAll", "KvsAll"])
def test_loss_on_gathered_rows_matches_the_full_table(mode):
    """A trainer that gathers the rows it needs (any order) and passes their global ids gets the
    loss of the full table when it gathers every row."""
    torch.manual_seed(6)
    tr = random_kg(n=20, r=3, m=80, seed=6)
    s, emb, f = ComplEx(3, 8), torch.randn(20, 8), TripleFilter(tr, 20, 3)
    perm = torch.randperm(20)
    local = torch.empty(20, dtype=torch.int64)
    local[perm] = torch.arange(20)                                  # global id -> row in emb[perm]
    rows = torch.stack([local[tr[:, 0]], tr[:, 1], local[tr[:, 2]]], 1)
    kw = {"known": f, "label_smoothing": 0.1, "n3": 0.01}
    full = kg_loss(s, emb, tr, mode, **kw)
    assert torch.allclose(kg_loss(s, emb[perm], rows, mode, ids=perm, **kw), full, atol=1e-6)


# -------------------------------------------------------------------------------------- training
def cluster_kg(seed=0):
    """40 entities in 4 clusters; relation 0 links a cluster to the next, relation 1 within a cluster
    (each pair with probability 0.9): held-out triples follow from cluster membership."""
    g = torch.Generator().manual_seed(seed)
    e = torch.arange(40)
    h, t = e.repeat_interleave(40), e.repeat(40)
    rel0 = (t // 10) == (h // 10 + 1) % 4
    rel1 = ((t // 10) == (h // 10)) & (h != t)
    tr = torch.cat([torch.stack([h[rel0], torch.zeros_like(h[rel0]), t[rel0]], 1),
                    torch.stack([h[rel1], torch.ones_like(h[rel1]), t[rel1]], 1)])
    tr = tr[torch.rand(len(tr), generator=g) < 0.9]
    perm = torch.randperm(len(tr), generator=g)
    return tr, tr[perm[60:]], tr[perm[:60]]


@pytest.fixture
def one_thread():
    """Tiny ops on a shared, busy machine: one thread (OpenMP's spinning costs 50x there)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("name,mode", [("complex", "1vsAll"), ("complex", "KvsAll"), ("complex", "negsample"),
                                       ("rotate", "1vsAll"), ("rotate", "negsample")])
def test_training_learns_a_small_kg_well_above_random(name, mode, one_thread):
    torch.manual_seed(0)
    known, train, test = cluster_kg()
    s = make_kg_scorer(name, 2, 16, init_std=0.1)
    emb = torch.nn.Parameter(torch.randn(40, 16) * 0.1)
    opt = torch.optim.Adagrad([emb, *s.parameters()], lr=0.2)
    tf = TripleFilter(train, 40, 2)
    for _ in range(150):
        for b in train[torch.randperm(len(train))].split(128):
            loss = kg_loss(s, emb, b, mode, known=tf, num_negatives=16, n3=1e-3, dropout=0.1)
            opt.zero_grad()
            loss.backward()
            opt.step()
    s.eval()
    learned = kg_metrics(filtered_ranks(table_score_fn(s, emb.detach()), test, known, 40))
    rand = kg_metrics(filtered_ranks(lambda a, r, side: torch.randn(len(a), 40), test, known, 40))
    assert learned["mrr"] > 0.6 and learned["mrr"] > 4 * rand["mrr"], (learned, rand)  # random: ~0.12
    assert learned["hits@10"] > 0.9
