"""Example 03 of OpenRath with the imports changed and the scripted provider."""

import os
import sys

import openrath_project.backend as backend
from openrath_project import flow
from openrath_project.session import Session


def on_event(delta):
    if delta.content_delta:
        sys.stdout.write(delta.content_delta)


def run_on(name):
    agent = flow.Agent(
        "You are a helpful assistant. Built-in filesystem tools are available.",
        flow.Provider(
            "scripted", fixture=[{"text": "An empty workspace."}, {"text": "Some files."}]
        ),
        on_event=on_event,
    )
    print(f"=== {name}: ephemeral workspace (spec=None) ===")
    ephemeral = Session.from_user_message("List the files.").to(name, spec=None)
    agent(ephemeral)
    print()
    print(f"\n=== {name}: host directory bound (spec='.') ===")
    bound = Session.from_user_message("List the files.").to(name, spec=".")
    agent(bound)
    print()
    print("specs differ:", ephemeral.placement["spec"] != bound.placement["spec"])
    # In a plain script spec="." is the script's working directory, as in OpenRath.
    print("bound to the working directory:", bound.placement["spec"] == os.getcwd())


name = sys.argv[1] if len(sys.argv) > 1 else "local"
if not backend.get(name).is_available():
    print(f"Sandbox backend {name!r} is not available.")
else:
    run_on(name)
