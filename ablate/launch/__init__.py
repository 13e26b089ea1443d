"""Launching: the staged pipeline, the one executor, the Optuna studies, preflight estimates.

Stages choose run specs; every run goes through :func:`ablate.launch.execute.execute`.
"""
