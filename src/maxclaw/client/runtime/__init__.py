"""The reference agent runtime (``maxclaw agent``): claims turns and runs the loop of seed 004.

    claim a turn ──▶ step: call the model → run its tool calls → take the inbox
                     ... until the model stops calling tools ──▶ finish ──▶ claim again

Modules: ``model`` (the adapter protocol), ``openai_model`` (Chat Completions through the
official ``openai`` SDK), ``scripted`` (replies from a file, for tests and the demo),
``workspace_tools`` (the local tools, confined to a workspace), ``loop`` (the runtime),
``prompt`` (the system prompt).
"""
