"""The judge's prompts for the LLM-judged RAG metrics: one versioned set, and the parsers of their replies.

Each step asks for one JSON object; its instruction follows the intent of the matching ragas 0.4.3 prompt
(``ragas/metrics/collections/*/util.py``), written for irflow. The set is versioned: ``PROMPT_VERSION`` and
``PROMPT_SHA256`` (over every instruction and template) go into a run's identity, so cached verdicts of
another prompt set are never reused. A reply is parsed strictly (the object's fields and types, one verdict
per statement asked about); a reply that does not parse raises ``ValueError`` saying why.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from irflow.tasks.rag.samples import Prompt

PROMPT_VERSION = "rag-judge-v1"


class _Reply(BaseModel):
    model_config = ConfigDict(extra="ignore")


class Statements(_Reply):
    statements: list[str]


class Verdict(_Reply):
    statement: str
    reason: str = ""
    verdict: Literal[0, 1]


class Verdicts(_Reply):
    verdicts: list[Verdict]


class Question(_Reply):
    question: str
    noncommittal: Literal[0, 1]


class Questions(_Reply):
    questions: list[Question]


class Useful(_Reply):
    reason: str = ""
    verdict: Literal[0, 1]


class Attribution(_Reply):
    statement: str
    reason: str = ""
    attributed: Literal[0, 1]


class Attributions(_Reply):
    classifications: list[Attribution]


class Claims(_Reply):
    claims: list[str]


@dataclass(frozen=True)
class Step:
    """One kind of judge call: its instruction (the system message), the reply's form, and its model."""

    name: str
    instruction: str
    form: str
    reply: type[_Reply]

    @property
    def system(self) -> str:
        return f"{self.instruction}\n\nAnswer with one JSON object and nothing else, of this form:\n{self.form}"


STATEMENTS = Step(
    "statements",
    "Given a question and an answer, analyse the complexity of each sentence of the answer and break each "
    "sentence down into one or more fully understandable statements. Use no pronouns in any statement: each "
    "statement must be understandable on its own.",
    '{"statements": ["<statement>", ...]}',
    Statements,
)
NLI = Step(
    "nli",
    "Judge the faithfulness of a series of statements to a given context. For each statement, in the order "
    "given, return verdict 1 if the statement can be directly inferred from the context and 0 if it cannot.",
    '{"verdicts": [{"statement": "<the statement, word for word>", "reason": "<why>", "verdict": 0 or 1}, ...]}',
    Verdicts,
)
QUESTIONS = Step(
    "questions",
    'Generate as many different questions as the input\'s "questions" field asks for, each one a question '
    "the given answer answers, and say for each whether the answer is noncommittal: "
    'noncommittal is 1 when the answer is evasive, vague or ambiguous (such as "I don\'t know", '
    '"I\'m not sure", "it depends") and 0 when it is substantive.',
    '{"questions": [{"question": "<a question the answer answers>", "noncommittal": 0 or 1}, ...]}',
    Questions,
)
USEFUL = Step(
    "useful",
    "Given a question, an answer and a context, verify whether the context was useful in arriving at the "
    "given answer: verdict 1 if it was useful, 0 if it was not.",
    '{"reason": "<why>", "verdict": 0 or 1}',
    Useful,
)
ATTRIBUTED = Step(
    "attributed",
    "Given a context and an answer, analyse each statement of the answer and classify whether the statement "
    "can be attributed to the context: attributed 1 if it can, 0 if it cannot. Give the reason for each.",
    '{"classifications": [{"statement": "<a statement of the answer>", "reason": "<why>", "attributed": 0 or 1}, ...]}',
    Attributions,
)
CLAIMS = Step(
    "claims",
    "Decompose each sentence of the given text into one or more standalone claims, each of which can be "
    "verified on its own. Keep each claim close to the sentence it comes from (one claim per fact stated).",
    '{"claims": ["<claim>", ...]}',
    Claims,
)
STEPS: dict[str, Step] = {step.name: step for step in (STATEMENTS, NLI, QUESTIONS, USEFUL, ATTRIBUTED, CLAIMS)}
USER_TEMPLATE = "Input:\n{input}\n\nAnswer with the JSON object only."
REMINDER = (
    "\n\nYour previous reply to this could not be read ({why}). Reply with exactly one JSON object of the "
    "form given, with nothing before or after it."
)
PROMPT_SHA256 = hashlib.sha256(
    "\0".join([USER_TEMPLATE, REMINDER, *(s.system for s in STEPS.values())]).encode()
).hexdigest()


def render(step: Step, **fields: Any) -> Prompt:
    """The prompt of ``step`` for these input fields (shown to the judge as a JSON object)."""
    return Prompt(step.system, USER_TEMPLATE.format(input=json.dumps(fields, indent=2, ensure_ascii=False)))


def remind(prompt: Prompt, why: str) -> Prompt:
    """The prompt asked again after an unreadable reply, with a reminder of the format."""
    return Prompt(prompt.system, prompt.user + REMINDER.format(why=why))


_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$", re.IGNORECASE)


def parse(step: Step, text: str) -> Any:
    """The reply of ``step`` in ``text`` (code fences and prose around the object tolerated); ValueError
    saying what is wrong when there is no such object."""
    text = _FENCE.sub("", (text or "").strip())
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end <= start:
        raise ValueError(f"no JSON object in reply {text[:80]!r}")
    try:
        return step.reply.model_validate(json.loads(text[start : end + 1]))
    except json.JSONDecodeError as err:
        raise ValueError(f"malformed JSON in reply {text[:80]!r}: {err}") from None
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the object"
        raise ValueError(f"expected {step.form} but {where}: {first['msg']}") from None
