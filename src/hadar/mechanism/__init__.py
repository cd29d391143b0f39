"""Round mechanics: plans, leases, the ledger, planners."""
