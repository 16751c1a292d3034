"""The embedded Redis requires a generated password; without it a client is refused."""
import stat
import subprocess

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from argosy.shared.coord import Coordinator, redact_url
from argosy.shared.redis_server import EmbeddedRedis


def test_generated_password_refuses_clients_without_it(tmp_path):
    with EmbeddedRedis(data_dir=str(tmp_path / "redis")) as srv:
        pw_file = tmp_path / "redis" / "password"
        assert srv.password and pw_file.read_text().strip() == srv.password
        assert stat.S_IMODE(pw_file.stat().st_mode) == 0o600
        assert stat.S_IMODE((tmp_path / "redis" / "redis.conf").stat().st_mode) == 0o600
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=srv.port, protocol=2, retry=Retry(NoBackoff(), 0)).ping()
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=srv.port, password="guess", retry=Retry(NoBackoff(), 0)).ping()
        assert Coordinator(srv.url, "j").r.ping()
        assert srv.password not in redact_url(srv.url)
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert srv.password not in ps                                   # never on a command line
        old = srv.password
    # a restart from the same data dir keeps the password (running services reconnect)
    with EmbeddedRedis(data_dir=str(tmp_path / "redis")) as again:
        assert again.password == old
        assert redis.Redis.from_url(again.url).ping()


def test_auth_can_be_turned_off():
    with EmbeddedRedis(auth=False) as srv:
        assert srv.password is None and "@" not in srv.url
        assert redis.Redis(host="127.0.0.1", port=srv.port).ping()


@pytest.mark.parametrize("url", ["redis://:pw-secret@h:1/0", "redis://user:pw-secret@h:1/0?password=pw-secret",
                                 "redis://h:1/0?password=pw-secret", "rediss://h/0?db=1&Password=pw-secret&x=1"])
def test_printed_urls_never_carry_the_password(url):
    out = redact_url(url)
    assert "pw-secret" not in out and "h" in out
