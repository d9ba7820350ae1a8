"""llama-server's ``/metrics`` for the simulator: the same families, types and help texts.

Members run with ``--metrics`` (the operator adds it) and the members' PodMonitor scrapes them,
so the simulator playing a member must serve what llama-server serves there: Prometheus text
(``text/plain; version=0.0.4``), every family ``llamacpp:``-prefixed, ten counters then five
gauges in llama-server's order. ``tests/e2e/test_llamacpp_contract.py`` holds the two servers to
the same families and types.

What the numbers mean here: prompt tokens are counted past the cached prefix as llama-server
counts them (``prompt_tokens_total`` excludes what ``prompt_tokens_cached_total`` counts);
prompt processing takes no time; one decode per prompt and one per generated token;
no speculative decoding, so those counters stay 0. The throughput gauges are, as llama-server's,
averages over the window since the previous scrape (:meth:`ServerMetrics.render` starts a new
window). Pure bookkeeping: the app calls :meth:`ServerMetrics.record` after each completion.
"""

from __future__ import annotations

import dataclasses
from typing import Final

#: The prefix of every family, as llama-server writes it.
PREFIX: Final = "llamacpp:"
#: The content type llama-server answers ``/metrics`` with.
CONTENT_TYPE: Final = "text/plain; version=0.0.4"
#: What ``/metrics`` answers (501) on a server started without ``--metrics``.
METRICS_DISABLED_MESSAGE: Final = (
    "This server does not support metrics endpoint. Start it with `--metrics`"
)

#: (name, help) of the counters, in llama-server's order.
COUNTERS: Final = (
    ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "Total time spent processing prompts"),
    ("tokens_predicted_total", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "Total time spent generating tokens"),
    ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding "
                       "and multimodal decoding"),
    ("n_tokens_max", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens_total",
     "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps"),
)  # fmt: skip
#: (name, help) of the gauges, in llama-server's order.
GAUGES: Final = (
    ("prompt_tokens_seconds", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "Average generation throughput in tokens/s"),
    ("requests_processing", "Number of requests processing"),
    ("requests_deferred", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call"),
)


def number(value: float) -> str:
    """A value as C++'s ``ostream <<`` writes a double (6 significant digits): ``0``, ``12``,
    ``2.37151``, ``1e+06``."""
    return format(value, "g")


@dataclasses.dataclass
class ServerMetrics:
    """What one simulated server has done, counted as llama-server counts it."""

    prompt_tokens: int = 0
    prompt_tokens_cached: int = 0
    tokens_predicted: int = 0
    predicted_seconds: float = 0.0
    n_decode: int = 0
    n_tokens_max: int = 0
    #: Busy slots summed over decodes (for ``n_busy_slots_per_decode``).
    busy_slots: int = 0
    #: Generation since the previous scrape: the throughput gauges' window.
    window_predicted: int = 0
    window_seconds: float = 0.0

    def record(
        self, *, prompt: int, cached: int, predicted: int, seconds: float, busy: int
    ) -> None:
        """One completion: ``prompt`` tokens of which ``cached`` came from the slot's cache,
        ``predicted`` tokens generated in ``seconds``, ``busy`` slots processing meanwhile."""
        self.prompt_tokens += prompt - cached
        self.prompt_tokens_cached += cached
        self.tokens_predicted += predicted
        self.predicted_seconds += seconds
        decodes = 1 + predicted
        self.n_decode += decodes
        self.busy_slots += decodes * max(busy, 1)
        self.n_tokens_max = max(self.n_tokens_max, prompt + predicted)
        self.window_predicted += predicted
        self.window_seconds += seconds

    def render(self, *, processing: int, deferred: int) -> str:
        """The ``/metrics`` body, given the requests processing and waiting for a slot now;
        starts a new throughput window, as a scrape of llama-server does."""
        throughput = self.window_predicted / self.window_seconds if self.window_seconds else 0.0
        counters = (
            self.prompt_tokens, self.prompt_tokens_cached, 0.0, self.tokens_predicted,
            self.predicted_seconds, self.n_decode, self.n_tokens_max, 0, 0, 0,
        )  # fmt: skip
        gauges = (0.0, throughput, processing, deferred, self.busy_slots / max(self.n_decode, 1))
        self.window_predicted, self.window_seconds = 0, 0.0
        lines = []
        for kind, families, values in (("counter", COUNTERS, counters), ("gauge", GAUGES, gauges)):
            for (name, text), value in zip(families, values, strict=True):
                lines += [
                    f"# HELP {PREFIX}{name} {text}",
                    f"# TYPE {PREFIX}{name} {kind}",
                    f"{PREFIX}{name} {number(value)}",
                ]
        return "\n".join(lines) + "\n"


def parse_text(text: str) -> dict[str, tuple[str, float]]:
    """Prometheus text as written above (one unlabelled sample per family): each family's name,
    in order, to its type and value. What a test reads both servers' ``/metrics`` with; raises
    ``ValueError`` naming a line it cannot read."""
    types: dict[str, str] = {}
    families: dict[str, tuple[str, float]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            if not name or "{" in name:
                raise ValueError(f"not an unlabelled sample: {line!r}")
            families[name] = (types.get(name, "untyped"), float(value))
    return families
