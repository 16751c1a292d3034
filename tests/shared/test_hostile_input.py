"""The hostile-input corpus: every malformed graph file gets a clear error, never a crash."""
from pathlib import Path

import pytest

from argosy.shared.errors import GraphFormatError
from argosy.shared.graphio import load_graph

CORPUS = sorted((Path(__file__).parents[1] / "corpus" / "graphs").iterdir())


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_reader_rejects_clearly(path):
    with pytest.raises(GraphFormatError) as e:
        load_graph(path)
    assert path.name in str(e.value) or "empty" in str(e.value) or "range" in str(e.value)


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_partitioner_rejects_without_partial_store(path, tmp_path, capsys):
    from argosy.services.partitioner.__main__ import main
    out = tmp_path / "store"
    rc = main([str(path), "--parts", "2", "--method", "random", "--out", str(out)])
    assert rc == 2
    assert "error" in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.iterdir()) == []
