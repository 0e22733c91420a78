"""Scraping /metrics as Prometheus would, and reading samples out of what it answered."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

Labels = frozenset[tuple[str, str]]


@dataclass(frozen=True)
class Scrape:
    """One scrape's samples, by sample name (`qim_frames_in_total`) and labels."""

    samples: dict[tuple[str, Labels], float]
    families: dict[str, str]  # family name -> type

    def value(self, name: str, **labels: str) -> float:
        """The sample's value; 0 for a labelled sample not seen yet (a counter not moved)."""
        key = (name, frozenset(labels.items()))
        if key not in self.samples and not labels:
            raise AssertionError(f"{name} is not exported")
        return self.samples.get(key, 0.0)


def parse(text: str) -> Scrape:
    samples: dict[tuple[str, Labels], float] = {}
    families: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = family.type
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return Scrape(samples, families)


def get_metrics(url: str, token: str | None = None, **headers: str) -> httpx.Response:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.get(url, headers=headers, timeout=30)


def scrape(url: str, token: str | None = None) -> Scrape:
    answer = get_metrics(url, token)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain"), answer.headers
    return parse(answer.text)


def scrape_until(url: str, token: str | None, ready: Callable[[Scrape], bool], timeout: float = 60) -> Scrape:
    """Scrape until `ready` holds: what a handler counts after its reply may land a moment
    after the client saw the reply. Fails with the last scrape's samples."""
    deadline = time.monotonic() + timeout
    while True:
        current = scrape(url, token)
        if ready(current) or time.monotonic() > deadline:
            return current
        time.sleep(0.1)
