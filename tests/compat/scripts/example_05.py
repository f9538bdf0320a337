"""OpenRath's example 05 (a ``FlowToolCall`` subclass), imports changed, scripted model.

The tool is a small arithmetic evaluator over a parsed expression (numbers and + - * / ** only);
the scripted model calls it once and then answers. The script prints the streamed answer and the
tool's result as the model received it.
"""

import ast
import json
import operator
import sys

from openrath_project import flow
from openrath_project.flow.tool import FlowToolCall
from openrath_project.session import Session

OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


def evaluate(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return float(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
        return OPERATORS[type(node.op)](evaluate(node.left), evaluate(node.right))
    raise ValueError("numbers and + - * / ** only")


class Arithmetic(FlowToolCall):
    parallel_safe = True

    @property
    def name(self):
        return "calculator"

    @property
    def description(self):
        return "Work out an arithmetic expression."

    @property
    def parameters(self):
        return {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        }

    def __call__(self, session, arguments):
        text = arguments["expression"]
        return {"expression": text, "result": evaluate(ast.parse(text, mode="eval").body)}


model = flow.Provider(
    "scripted",
    fixture=[
        {"tool_calls": [{"name": "calculator", "arguments": {"expression": "(128*37)+(2**10)"}}]},
        {"text": "It is 5760."},
    ],
)
agent = flow.Agent(
    "Use the calculator.",
    model,
    tools=[Arithmetic()],
    on_event=lambda d: d.content_delta and sys.stdout.write(d.content_delta),
)
out = agent(Session.from_user_message("What is (128*37)+(2**10)?").to("local"))
print()
results = [r.payload for r in out.chunk_table.rows if r.kind == "tool_result"]
print([(p["name"], json.loads(p["content"])) for p in results])
