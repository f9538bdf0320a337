"""4. Custom tools: ``@flow.tool`` from type hints and a docstring, and a hand-written
``flow.FlowToolCall``; a bad call becomes an error the model can correct."""

from __future__ import annotations

from typing import Any

from openrath_project.examples._setup import django_ready, example_project, provider


def main() -> dict[str, Any]:
    django_ready()
    from openrath_project import flow

    @flow.tool
    def convert(amount: float, currency: str = "EUR") -> dict[str, Any]:
        """Convert US dollars to another currency.

        Args:
            amount: how many dollars.
            currency: the target currency code.
        """
        rates = {"EUR": 0.9, "GBP": 0.8}
        return {"amount": round(amount * rates[currency], 2), "currency": currency}

    class Clock(flow.FlowToolCall):
        name = "clock"
        description = "The time in the office (fixed, for the example)."
        parameters = {"type": "object", "properties": {}, "additionalProperties": False}

        def __call__(self, session: Any, arguments: dict[str, Any]) -> Any:
            return {"time": "09:30"}

    teller = flow.Agent(
        "You convert money.",
        provider(
            [
                {"tool_calls": [{"name": "convert", "arguments": {"amount": "ten"}}]},
                {
                    "tool_calls": [
                        {"name": "convert", "arguments": {"amount": 10}},
                        {"name": "clock", "arguments": {}},
                    ]
                },
                {"text": "10 USD is 9.0 EUR (at 09:30)."},
            ]
        ),
        tools=[convert, Clock()],
        name="teller",
    )
    session = flow.Session.from_user_message("10 dollars in euros?", project=example_project())
    session = teller(session)
    results = [c.content for c in session.chunks if c.kind == "tool_result"]
    print(convert.schema())
    return {"schema": convert.schema(), "results": results, "answer": session.text()}


if __name__ == "__main__":
    main()
