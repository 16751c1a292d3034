"""The launcher restarts its embedded Redis even while it is itself inside a Redis call (real server).

The check used to run only between the driver's steps: a server killed while the driver was in a
Redis call was never restarted (the call retried against a dead server for ~60 s, then the launcher
crashed: the one-hour soak, at 39 min, after a Redis kill).  Now a thread of the driver watches it.
"""
import signal

from argosy.services.driver import JobDriver
from argosy.shared.coord import Coordinator
from argosy.shared.redis_server import EmbeddedRedis


def test_a_redis_killed_while_the_driver_is_in_a_call_comes_back(tmp_path):
    with EmbeddedRedis(data_dir=str(tmp_path / "redis")) as server:
        coord = Coordinator(server.url, "redis-watch")
        coord.set_state("running")
        driver = JobDriver(coord, 1, stack=None, embedded=server)
        driver.start_redis_watch()
        try:
            server.proc.send_signal(signal.SIGKILL)
            server.proc.wait()
            # a call made while the server is dead: only the watch thread can bring it back
            assert coord.r.ping()
            assert driver.redis_restarts == 1
            assert coord.get_state() == "running"          # from the append-only file
        finally:
            driver.stop_redis_watch()
            coord.close()
