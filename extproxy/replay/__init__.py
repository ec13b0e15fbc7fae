"""Replay: re-run recorded calls against backends, URLs or policies, and diff the decisions.

diff.py (pure) compares two sides; targets.py builds the engine a replay runs against;
runner.py replays calls and stores runs; worker.py runs stored runs in the background.
"""
