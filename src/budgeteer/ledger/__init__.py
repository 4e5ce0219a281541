"""Money: billing an attempt's time into exact ledger entries, the money views over the ledger
(accounting) and the ledger compacted for planning (the spend book)."""
