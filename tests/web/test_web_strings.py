"""The API's own words for how a turn ended are localized by the asker's language."""

from __future__ import annotations

import asyncio

from aiohttp.test_utils import make_mocked_request

from adapters.web.follow import final_of
from adapters.web.routes import locale_of, note_final
from botgateway.events import TurnFailed
from botgateway.messages import Submission, TurnOutcome
from botgateway.strings import t


def test_a_stopped_or_moved_turn_ends_in_the_askers_language() -> None:
    stopped = final_of(TurnOutcome(turn_id="t1", outcome="stopped"), "zh-CN")
    assert isinstance(stopped, TurnFailed) and stopped.reason == "cancelled"
    assert stopped.message == t("zh-CN", "web_turn_stopped") and "停止" in stopped.message
    moved = final_of(TurnOutcome(turn_id="t1", outcome="moved"), "en")
    assert isinstance(moved, TurnFailed) and moved.message == t("en", "web_turn_moved")
    crashed = final_of(TurnOutcome(turn_id="t1", outcome="crashed"), "zh-CN")
    assert isinstance(crashed, TurnFailed) and crashed.message == t("zh-CN", "web_turn_ended", outcome="crashed")


async def test_a_refusal_without_words_of_its_own_is_told_in_the_askers_language() -> None:
    done: asyncio.Future[TurnOutcome] = asyncio.get_running_loop().create_future()
    done.set_result(TurnOutcome(turn_id="", outcome="refused"))
    final = await note_final(Submission(status="refused", turn_id="", done=done), "zh-CN")
    assert isinstance(final, TurnFailed) and final.message == t("zh-CN", "web_question_refused")


def test_the_locale_is_the_bodys_else_the_accept_language() -> None:
    chinese = make_mocked_request("POST", "/v1/turns", headers={"Accept-Language": "zh-CN,zh;q=0.9"})
    english = make_mocked_request("POST", "/v1/turns", headers={"Accept-Language": "en-GB"})
    assert locale_of(chinese) == "zh-CN" and locale_of(english) == "en"
    assert locale_of(english, {"locale": "zh_CN"}) == "zh-CN"
    assert locale_of(chinese, {"locale": "en"}) == "en"
    assert locale_of(chinese, {"locale": 7}) == "zh-CN"  # not a name: the header decides
