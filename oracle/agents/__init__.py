"""Agents from the world: command agents (any program), which program ran, the scripted demo
agents, and the container backend.
"""
