"""Following what sessions do: the pane watches, activity, hooks and conversation ids,
containment. Imports the model, state/ and host/'s helpers; the edges themselves come in
through ports.
"""
