"""OpenRath's example 11 (routing with a Selector), imports changed, scripted model.

One scripted provider serves the selector and three agents, in call order: the ``if`` picks
billing once; the ``while`` loop runs tech, then wrap-up, and ends when the selector answers -1
(``flow.EmptyWorkflow``).
"""

from openrath_project import flow
from openrath_project.session import Session

model = flow.Provider(
    "scripted",
    fixture=[
        {"text": "0"},
        {"text": "Refund issued."},
        {"text": "I pick 0"},
        {"text": "Reinstall it."},
        {"text": "2"},
        {"text": "Fixed install."},
        {"text": "-1"},
    ],
)
router = flow.Selector(model)
billing = flow.Agent("Billing.", model, description="billing questions")
tech = flow.Agent("Tech.", model, description="technical problems")
wrapup = flow.Agent("Wrap up.", model, description="closing summary")

session = Session.from_user_message("I was charged twice.").to("local")
picked = router.forward(session, billing, tech)
if not isinstance(picked, flow.EmptyWorkflow):
    print("if ->", picked.description, "|", picked(session).text())

session = Session.from_user_message("Install failed; then summarise.").to("local")
steps = []
while not isinstance(nxt := router.forward(session, tech, billing, wrapup), flow.EmptyWorkflow):
    steps.append(nxt.description)
    session = nxt(session)
    if len(steps) > 4:
        break
print("while ->", steps, "|", session.text())
