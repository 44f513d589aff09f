"""qjit.tune: placeholder until the tuning wrapper lands."""

from __future__ import annotations


class TuneRow:  # replaced by the real wrapper
    pass


class TuneResult:  # replaced by the real wrapper
    pass


def tune(**kwargs):
    raise NotImplementedError("qjit.tune")


def main(argv=None):
    raise NotImplementedError("qjit.tune")
