"""Test helper: publish one epoch's work items in Redis and claim them all, as a sampler would."""
from argosy.shared.coord import Coordinator
from argosy.shared.validate import job_plan


def publish_and_claim(redis_url: str, cfg, store, epoch: int = 0, phase: str = "train"):
    """A fresh job ``cfg.job``: its plan published, then claimed by ``sampler-t``.  Returns
    ``(coord, plan, claimed, ref)``: ``ref`` maps a batch id to its ``(stream, entry id)``."""
    coord = Coordinator(redis_url, cfg.job)
    coord.delete_job()
    coord.ensure_groups(store.num_parts)
    plan = job_plan(cfg, store, epoch, phase)
    coord.publish_work([(it.part, it.to_fields()) for it in plan])
    claimed = coord.claim(list(range(store.num_parts)), "sampler-t", count=len(plan), block_ms=200)
    ref = {int(f["batch_id"]) if "batch_id" in f else None: (s, e) for s, e, f in claimed}
    return coord, plan, claimed, ref
