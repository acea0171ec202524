"""A stateful model test: random appends, trims, crashes and reopens against a dict of acked entries."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from wal import MemoryWalStorage, WalWriter


class WalModel(RuleBasedStateMachine):
    """Every acked entry stays readable, with its seq, until a trim may remove whole files below it."""

    def __init__(self) -> None:
        super().__init__()
        self.storage = MemoryWalStorage("model")
        self.file_bytes = 256
        self.writer: WalWriter | None = WalWriter(storage=self.storage, file_bytes=self.file_bytes)
        self.acked: dict[int, bytes] = {}
        self.next_seq = 0
        self.first_seq = 0
        self.trimmed_upto = -1

    @precondition(lambda self: self.writer is not None)
    @rule(payload=st.binary(max_size=120))
    def append(self, payload: bytes) -> None:
        assert self.writer is not None
        assert self.writer.append(payload) == self.next_seq
        self.acked[self.next_seq] = payload
        self.next_seq += 1

    @precondition(lambda self: self.writer is not None)
    @rule(payloads=st.lists(st.binary(max_size=60), max_size=8))
    def append_async(self, payloads: list[bytes]) -> None:
        assert self.writer is not None
        futures = [self.writer.append_async(p) for p in payloads]
        for p, f in zip(payloads, futures, strict=True):
            assert f.result(10) == self.next_seq
            self.acked[self.next_seq] = p
            self.next_seq += 1

    @precondition(lambda self: self.writer is not None)
    @rule(back=st.integers(0, 20))
    def trim(self, back: int) -> None:
        assert self.writer is not None
        upto = self.next_seq - 1 - back
        self.writer.trim(upto)
        self.trimmed_upto = max(self.trimmed_upto, upto)

    @precondition(lambda self: self.writer is not None)
    @rule(torn=st.booleans(), seed=st.integers(0, 2**16))
    def crash(self, torn: bool, seed: int) -> None:
        self.storage.crash(torn_tail=torn, rng_seed=seed)
        assert self.writer is not None
        self.writer.close()  # fsync=True: nothing was pending, so this is quiet
        self.writer = None

    @precondition(lambda self: self.writer is not None)
    @rule()
    def close(self) -> None:
        assert self.writer is not None
        self.writer.close()
        self.writer = None

    @precondition(lambda self: self.writer is None)
    @rule(file_bytes=st.sampled_from([64, 256, 4096]))
    def reopen(self, file_bytes: int) -> None:
        self.file_bytes = file_bytes
        self.writer = WalWriter(storage=self.storage, file_bytes=file_bytes)
        assert self.writer.next_seq == self.next_seq

    @invariant()
    def stored_entries_match_the_acked_ones(self) -> None:
        if self.writer is None:
            return
        first = self.writer.first_seq
        assert self.first_seq <= first <= max(self.first_seq, self.trimmed_upto + 1)
        self.first_seq = first
        assert self.writer.next_seq == self.next_seq
        entries = list(self.writer.entries())
        assert [e.seq for e in entries] == list(range(first, self.next_seq))
        assert all(e.payload == self.acked[e.seq] for e in entries)

    def teardown(self) -> None:
        if self.writer is not None:
            self.writer.close()


WalModel.TestCase.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestWalModel = WalModel.TestCase
