"""Answers on record: what a finished answer asked and used, its votes, and its Refresh."""

from __future__ import annotations

from botgateway.answers.book import ANSWERABLE, Answer, AnswerBook, as_question, is_question, offers_answer_controls
from botgateway.answers.feedback import MAX_REASON_CHARS, FeedbackDesk, Vote, one_line, parse_reason, parse_vote
from botgateway.answers.refresh import REFRESH_WORDS, Refresher

__all__ = [
    "ANSWERABLE",
    "MAX_REASON_CHARS",
    "REFRESH_WORDS",
    "Answer",
    "AnswerBook",
    "FeedbackDesk",
    "Refresher",
    "Vote",
    "as_question",
    "is_question",
    "offers_answer_controls",
    "one_line",
    "parse_reason",
    "parse_vote",
]
