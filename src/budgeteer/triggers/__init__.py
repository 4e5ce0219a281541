"""Retraining signals: drift and skew statistics (:mod:`.drift`), the trigger policy that turns
a signal into a tiered retrain and dedupes it (:mod:`.policy`), and what reads files and
submits (:mod:`.tables`, :mod:`.apply`)."""
