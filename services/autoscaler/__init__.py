"""The autoscaler role: grow or shrink the sampler/loader tiers until trainers stop waiting."""
