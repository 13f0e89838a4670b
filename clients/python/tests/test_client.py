"""The Python client against real gateways: every kind of write outcome it can be told, reads
with their source, settling, the change feed, and the edge where a client most easily lies
(the connection breaks after the request left: that is never "nothing was sent").

Run from clients/python: `python3 -m unittest -v` (after `cargo build -p ferry-tests --bins`).
"""

from __future__ import annotations

import socket
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ferry_client as ferry  # noqa: E402
from gateways import Gateway, pair_with_notes  # noqa: E402

SETTLE_BOUND_S = 30.0


class AgainstAPair(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.a, cls.b = pair_with_notes()
        cls.owner = ferry.Client(app="py-test", home=cls.a.home)
        cls.caller = ferry.Client(app="py-test", home=cls.b.home)

    @classmethod
    def tearDownClass(cls):
        cls.a.stop()
        cls.b.stop()

    def test_a_write_through_a_peer_is_done_and_reads_back_with_its_source(self):
        result = self.caller.put("notes", "dir/with spaces.txt", b"hello")
        self.assertIsInstance(result, ferry.Done, result)
        self.assertEqual(len(result.request_id), 36)
        record = self.caller.get("notes", "dir/with spaces.txt")
        self.assertEqual((record.value, record.revision), (b"hello", result.revision))
        self.assertIn(record.source, ("owner", "cache"))
        local = self.owner.get("notes", "dir/with spaces.txt")
        self.assertEqual((local.source, local.stale), ("local", False))
        self.assertIsNone(self.caller.get("notes", "never-written"))

    def test_a_compare_and_swap_on_a_changed_record_is_refused_with_the_current_revision(self):
        done = self.caller.put("notes", "cas", b"1")
        self.assertIsInstance(done, ferry.Done, done)
        refused = self.caller.put("notes", "cas", b"2", if_revision=0)
        self.assertIsInstance(refused, ferry.Refused, refused)
        self.assertEqual((refused.status, refused.error, refused.current_revision), (409, "conflict", done.revision))
        self.assertIsNone(refused.may_resend_after_s(), "a conflict must not be sent again as it is")
        deleted = self.caller.delete("notes", "cas", if_revision=done.revision)
        self.assertIsInstance(deleted, ferry.Done, deleted)
        self.assertIsNone(self.owner.get("notes", "cas"))

    def test_bad_input_is_invalid_and_nothing_is_sent(self):
        unknown_vault = self.caller.put("nowhere", "k", b"x")
        self.assertIsInstance(unknown_vault, ferry.Invalid, unknown_vault)
        self.assertEqual((unknown_vault.status, unknown_vault.error), (404, "unknown_vault"))
        bad_timeout = self.caller.put("notes", "k", b"x", timeout_s=0)
        self.assertIsInstance(bad_timeout, ferry.Invalid, bad_timeout)
        # What cannot be a header is refused before anything leaves, never outcome_unknown.
        bad_id = self.caller.put("notes", "k", b"x", request_id="two\nlines")
        self.assertIsInstance(bad_id, ferry.Invalid, bad_id)
        bad_app = ferry.Client(app="café", home=self.b.home).put("notes", "k", "x")
        self.assertIsInstance(bad_app, ferry.Invalid, bad_app)
        text = self.caller.put("notes", "text", "written as str: ü")
        self.assertIsInstance(text, ferry.Done, text)
        self.assertEqual(self.owner.get("notes", "text").value, "written as str: ü".encode())

    def test_a_done_write_settles_done_and_an_id_never_sent_is_known_as_such(self):
        done = self.caller.put("notes", "settled", b"x")
        self.assertIsInstance(done, ferry.Done, done)
        self.assertEqual(self.caller.settle(done.request_id), ferry.SettledDone(done.revision))
        never = self.caller.settle(ferry.new_request_id())
        self.assertIsInstance(never, (ferry.NeverSent, ferry.SettledNotCarriedOut), never)

    def test_the_change_feed_pages_and_waits_for_news(self):
        start = self.owner.changes("notes").vault_revision
        done = self.caller.put("notes", "fed", b"x")
        page = self.owner.changes("notes", after=start)
        self.assertIn(ferry.Change("fed", done.revision, False), page.changes)
        woke = []

        def write_soon():
            time.sleep(0.3)
            woke.append(self.caller.put("notes", "fed-later", b"y"))

        writer = threading.Thread(target=write_soon)
        writer.start()
        waited = self.owner.changes("notes", after=page.next, wait_s=10)
        writer.join()
        self.assertEqual([c.key for c in waited.changes], ["fed-later"], waited)


class WhenTheLocalGatewayIsDown(unittest.TestCase):
    def test_a_write_says_local_gateway_down_and_a_settle_never_says_nothing_was_written(self):
        # A state directory whose gateway is gone: api.addr names a port nothing listens on.
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        with tempfile.TemporaryDirectory() as home:
            Path(home, "api.addr").write_text(f"127.0.0.1:{port}\n")
            Path(home, "local-token").write_text("0" * 64)
            client = ferry.Client(app="py-test", home=home)
            result = client.put("notes", "k", b"x")
            self.assertIsInstance(result, ferry.LocalGatewayDown, result)
            self.assertIn("nothing was sent", result.detail)
            settled = client.settle(ferry.new_request_id(), vault="notes")
            self.assertIsInstance(settled, ferry.SettleUnavailable, settled)
            with self.assertRaises(ferry.GatewayDown):
                client.get("notes", "k")
        with tempfile.TemporaryDirectory() as empty:
            self.assertIsInstance(ferry.Client(app="py-test", home=empty).put("notes", "k", b"x"), ferry.LocalGatewayDown)

    def test_a_connection_that_breaks_after_the_request_left_is_outcome_unknown(self):
        # A "gateway" that takes the whole request and hangs up without a word: the request
        # left, so the client must not say nothing was sent.
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen()
        received = []

        def take_and_hang_up():
            connection, _ = server.accept()
            with connection:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = connection.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                received.append(data)

        thread = threading.Thread(target=take_and_hang_up)
        thread.start()
        client = ferry.Client(app="py-test", address=f"127.0.0.1:{server.getsockname()[1]}", token="t")
        result = client.put("notes", "k", b"x")
        thread.join()
        server.close()
        self.assertIsInstance(result, ferry.OutcomeUnknown, result)
        self.assertEqual(len(received), 1)
        self.assertIn(f"x-ferry-request-id: {result.request_id}".lower(), received[0].decode().lower())


class WhenTheOwnerAnswersTooLate(unittest.TestCase):
    def test_outcome_unknown_carries_its_request_id_and_settles_to_the_truth(self):
        # The owner holds every write batch 1.5 s before its commit; the caller gives up at 1 s.
        a, b = pair_with_notes({"FERRY_DANGEROUS_FAULT": "before_commit=stall:1500"})
        try:
            caller = ferry.Client(app="py-test", home=b.home)
            warm = caller.put("notes", "warm-up", b"x")
            self.assertIsInstance(warm, ferry.Done, warm)
            result = caller.put("notes", "held", b"carried out late", timeout_s=1)
            self.assertIsInstance(result, ferry.OutcomeUnknown, result)
            self.assertEqual((result.vault, result.owner), ("notes", "a"))
            started = time.monotonic()
            settled = caller.settle(result.request_id, vault="notes", wait_s=5)
            while isinstance(settled, (ferry.StillRunning, ferry.SettleUnavailable)):
                self.assertLess(time.monotonic() - started, SETTLE_BOUND_S, f"never settled: {settled}")
                settled = caller.settle(result.request_id, vault="notes", wait_s=5)
            self.assertIsInstance(settled, ferry.SettledDone, settled)
            record = ferry.Client(app="py-test", home=a.home).get("notes", "held")
            self.assertEqual((record.value, record.revision), (b"carried out late", settled.revision))
            # The same id sent again is answered from the owner's journal, not run twice.
            again = caller.put("notes", "held", b"carried out late", request_id=result.request_id)
            self.assertEqual(again, ferry.Done(settled.revision, result.request_id))
        finally:
            a.stop()
            b.stop()


if __name__ == "__main__":
    unittest.main()
