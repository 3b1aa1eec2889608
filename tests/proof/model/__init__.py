"""The model checker: a simulated store, simulated workers, and an explorer of their
interleavings, with the guarantees checked as invariants after every transition.

``store`` is the store in memory, held to the SQL store's fencing rules by the
conformance bridge (tests/integration/test_model_conformance.py); ``world`` puts
it together with workers, a reaper, an operator and a ledger of tool executions;
``explorer`` searches the world's transitions breadth first.
"""
