"""Orchestrators submit through budgeteer: an Airflow provider (:mod:`.airflow`), a Kubeflow
Pipelines component (:mod:`.kfp`) and a Metaflow step helper (:mod:`.metaflow`), each an
optional extra (``pip install budgeteer[airflow]``, ``[kfp]``, ``[metaflow]``). What they share —
submit with an idempotency key, wait, and turn the job's end into success or an error naming
the job's reason — is :mod:`.common`. See ``docs/integrations.md``."""
