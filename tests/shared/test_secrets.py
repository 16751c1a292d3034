"""Secrets stay private: stack files (they hold the Redis URL with its password) are 0600 in a 0700 directory."""
import json
import stat

from argosy.services.stack import StackFile, StackInfo


def test_stack_file_is_private(tmp_path):
    sf = StackFile("job", tmp_path / "stacks")
    sf.write(StackInfo(job="job", redis="redis://:s3cret@127.0.0.1:1/0", run_dir=str(tmp_path)))
    assert stat.S_IMODE(sf.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(sf.path.parent.stat().st_mode) == 0o700
    with sf.update() as info:
        info.pids["sampler-0"] = 1
    assert stat.S_IMODE(sf.path.stat().st_mode) == 0o600
    assert json.loads(sf.path.read_text())["pids"] == {"sampler-0": 1}
