"""The kernel keepalive's schedule (qim/server/heartbeat.py `kernel_schedule`): the first probe
never later than the interval and spread per socket, and the kernel's abort only after every
probe in the timeout went unanswered: with TCP_USER_TIMEOUT counting from the start of the
silence, one probe lost (on loopback, more than netdev_max_backlog probes leaving in one timer
softirq) aborted live sockets
(docs/performance.md, "Idle cost: the timing wheel and the kernel's TCP keepalive")."""

from __future__ import annotations

import socket

import pytest

from qim.server.heartbeat import JITTER, PROBES, TCP_USER_TIMEOUT, kernel_schedule, set_kernel_keepalive


@pytest.mark.parametrize("draw", [0.0, 0.37, 0.999])
def test_the_first_probe_comes_within_the_interval_and_every_probe_fits_before_the_abort(draw: float) -> None:
    schedule = kernel_schedule(25.0, 30.0, draw)
    assert 25 * (1 - JITTER) - 1 <= schedule.idle_s <= 25
    probes_before_abort = (schedule.user_timeout_ms / 1000 - schedule.idle_s) / schedule.probe_interval_s
    assert probes_before_abort >= PROBES, "the kernel would abort before every probe had its chance"
    # A dead peer is found as under the Pong: the timeout after the first unanswered packet.
    assert schedule.user_timeout_ms == (schedule.idle_s + 30) * 1000


def test_draws_spread_the_first_probe_over_several_seconds() -> None:
    firsts = {kernel_schedule(25.0, 30.0, i / 100).idle_s for i in range(100)}
    assert min(firsts) == 20 and max(firsts) == 25 and len(firsts) == 6


def test_short_test_timings_stay_whole_seconds_and_ordered() -> None:
    schedule = kernel_schedule(1.0, 2.0, 0.5)
    assert (schedule.idle_s, schedule.probe_interval_s, schedule.user_timeout_ms) == (1, 1, 3000)


def test_without_a_user_timeout_the_probe_count_decides() -> None:
    schedule = kernel_schedule(25.0, 0.0, 0.0)
    assert schedule.user_timeout_ms == 0 and schedule.probe_count >= PROBES


def test_the_schedule_is_what_the_socket_holds() -> None:
    schedule = kernel_schedule(25.0, 30.0, 0.5)
    with socket.socket() as sock:
        assert set_kernel_keepalive(sock, schedule)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == schedule.idle_s
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == schedule.probe_interval_s
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == schedule.probe_count
        assert sock.getsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT) == schedule.user_timeout_ms
