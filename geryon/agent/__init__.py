"""The Geryon host agent: declarative host QoS with plan/apply/verify/restore and drift repair.

Config (`geryon.agent.config`) is pure validation; drivers (`geryon.agent.driver`) read and write
named targets; the engine diffs and applies transactionally; the daemon keeps the host in sync.
"""
