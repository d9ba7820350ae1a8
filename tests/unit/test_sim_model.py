"""The simulated model: loading, slot occupancy, queueing, token timing, deterministic text."""

from __future__ import annotations

import anyio
import pytest

from controlplane.sim.model import NO_TASK, SimulatedModel
from controlplane.sim.settings import SimSettings
from controlplane.sim.testing import GatedClock, ManualClock, wait_until
from controlplane.sim.text import count_prompt_tokens, plan_reply, reply_tokens

pytestmark = pytest.mark.anyio


def _processing(model: SimulatedModel) -> list[bool]:
    return [slot.processing for slot in model.slots()]


async def test_the_model_is_loading_until_it_has_slept_the_load_time() -> None:
    clock = ManualClock()
    model = SimulatedModel(SimSettings(load_seconds=7.5), clock)
    assert not model.ready
    await model.load()
    assert model.ready
    assert clock.sleeps == [7.5]
    await model.load()  # idempotent: no second load
    assert clock.sleeps == [7.5]


async def test_a_completion_holds_the_lowest_idle_slot_and_frees_it_on_exit() -> None:
    model = SimulatedModel(SimSettings(slots=3), ManualClock())
    assert _processing(model) == [False, False, False]
    async with model.occupy(n_predict=5, stream=True) as first:
        assert first.id == 0
        async with model.occupy() as second:
            assert second.id == 1
            assert _processing(model) == [True, True, False]
            states = model.slots()
            assert (states[0].id_task, states[1].id_task) == (0, 1)
            assert (states[0].stream, states[0].n_predict) == (True, 5)
        assert _processing(model) == [True, False, False]
        async with model.occupy() as reused:
            assert reused.id == 1  # the lowest idle one, not the next never-used one
    assert _processing(model) == [False, False, False]
    # Finished slots keep their last task (llama-server's /slots shows it); the unused one has none.
    assert [state.id_task for state in model.slots()] == [0, 2, NO_TASK]
    assert [state.used for state in model.slots()] == [True, True, False]


async def test_a_failing_completion_still_frees_its_slot() -> None:
    model = SimulatedModel(SimSettings(slots=1), ManualClock())
    with pytest.raises(RuntimeError, match="boom"):
        async with model.occupy():
            raise RuntimeError("boom")
    assert _processing(model) == [False]
    with anyio.fail_after(5):
        async with model.occupy() as slot:  # would wait forever had the slot leaked
            assert slot.id == 0


async def test_when_every_slot_is_busy_requests_wait_and_are_admitted_in_arrival_order() -> None:
    model = SimulatedModel(SimSettings(slots=1), ManualClock())
    admitted: list[str] = []
    most_busy = 0
    release_first = anyio.Event()

    async def complete(name: str, hold: anyio.Event | None) -> None:
        nonlocal most_busy
        async with model.occupy():
            admitted.append(name)
            most_busy = max(most_busy, sum(_processing(model)))
            if hold is not None:
                await hold.wait()

    async with anyio.create_task_group() as group:
        group.start_soon(complete, "first", release_first)
        await wait_until(lambda: admitted == ["first"])
        group.start_soon(complete, "second", None)
        await wait_until(lambda: model.waiting == 1)
        group.start_soon(complete, "third", None)
        await wait_until(lambda: model.waiting == 2)
        assert admitted == ["first"]  # the others are queued, not running
        assert _processing(model) == [True]
        release_first.set()
    assert admitted == ["first", "second", "third"]
    assert most_busy == 1
    assert model.waiting == 0
    assert _processing(model) == [False]


async def test_a_request_cancelled_while_queued_leaves_the_queue() -> None:
    model = SimulatedModel(SimSettings(slots=1), ManualClock())
    async with model.occupy():
        with anyio.move_on_after(0.05) as scope:
            async with model.occupy():
                pytest.fail("admitted while the only slot was busy")
        assert scope.cancelled_caught
        assert model.waiting == 0
    with anyio.fail_after(5):
        async with model.occupy() as slot:
            assert slot.id == 0


async def test_generation_takes_token_seconds_per_token_and_counts_them_on_the_slot() -> None:
    clock = ManualClock()
    model = SimulatedModel(SimSettings(token_seconds=0.25), clock)
    async with model.occupy(n_predict=3) as slot:
        produced = [token async for token in model.generate(slot, ["a", " b", " c"])]
        assert (slot.n_decoded, slot.n_remain) == (3, 0)
    assert produced == ["a", " b", " c"]
    assert clock.sleeps == [0.25, 0.25, 0.25]
    assert clock.now() == pytest.approx(0.75)


async def test_the_slot_reports_processing_while_a_token_is_being_generated() -> None:
    clock = GatedClock()
    model = SimulatedModel(SimSettings(slots=2), clock)

    async def complete() -> None:
        async with model.occupy() as slot:
            async for _ in model.generate(slot, ["x", " y"]):
                pass

    async with anyio.create_task_group() as group:
        group.start_soon(complete)
        await wait_until(lambda: clock.blocked == 1)
        assert _processing(model) == [True, False]
        assert model.slots()[0].n_decoded == 0
        clock.open()
    assert _processing(model) == [False, False]


async def test_a_slow_slots_wait_ends_when_shutdown_begins() -> None:
    model = SimulatedModel(SimSettings(), ManualClock())
    with anyio.fail_after(5):  # the hang is an hour: only shutdown can end it in time
        async with anyio.create_task_group() as group:
            group.start_soon(model.hang, 3600.0)
            await anyio.sleep(0.01)
            model.begin_shutdown()
    assert model.closing


def test_the_reply_is_the_prompts_words_repeated_one_token_each() -> None:
    assert reply_tokens("hello there", 5) == ("hello", " there", " hello", " there", " hello")
    assert reply_tokens("hello there", 5) == reply_tokens("  hello   there ", 5)
    assert reply_tokens("other words", 2) != reply_tokens("hello there", 2)
    assert reply_tokens("", 2) == ("simulated", " tokens")
    assert reply_tokens("x", 0) == ()


@pytest.mark.parametrize(
    ("max_tokens", "ignore_eos", "context_left", "count", "finish"),
    [
        (None, False, 4096, 8, "stop"),  # the model ends the reply by itself
        (20, False, 4096, 8, "stop"),  # a high limit does not lengthen it
        (3, False, 4096, 3, "length"),  # a low limit cuts it
        (8, False, 4096, 8, "stop"),  # exactly at the limit the model still ended it
        (20, True, 4096, 20, "length"),  # ignore_eos runs to the limit
        (None, True, 30, 30, "length"),  # ... or to the end of the context
        (None, False, 5, 5, "length"),  # the context cuts a natural reply
        (0, False, 4096, 0, "length"),
    ],
)
def test_plan_reply_honours_max_tokens_ignore_eos_and_the_context(
    max_tokens: int | None, ignore_eos: bool, context_left: int, count: int, finish: str
) -> None:
    reply = plan_reply(
        "a b c",
        natural_tokens=8,
        max_tokens=max_tokens,
        ignore_eos=ignore_eos,
        context_left=context_left,
    )
    assert len(reply.tokens) == count
    assert reply.finish_reason == finish
    assert reply.text == "".join(reply_tokens("a b c", count))


def test_prompt_tokens_are_words_plus_template_markers_per_message() -> None:
    assert count_prompt_tokens(["one two", "three"]) == 3 + 2 * 4
    assert count_prompt_tokens([""]) == 4
