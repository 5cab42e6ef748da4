"""Planning communication inside a server: aggregation schedules over its links (`geryon plan`).

topology (the graph: built-ins and the JSON file format), routes (paths through switches),
spanning_trees (the linear program of paper 003 on the spanning tree polytope, solved by column
generation with a minimum-spanning-tree oracle), aggregation (the times of a tree, a ring and a PS, and
the report), cli (`geryon plan aggregation`). SciPy (the `plan` extra) is imported only by the solver.
"""
