"""What every group of steps shares: the command line and results (`cli`), files and folders (`io`), sealed folders,
the dataset's and the online outcomes' formats, the MLflow client and registry aliases, the gate's statistics and
the teachers' terms, the private CA a pod may trust (`trust`). Imports only the serving contract.
"""
