"""Schedulers decide, each step, which requests run and how many tokens each computes."""
