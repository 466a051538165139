"""From records to numbers: per-request metrics, SLA and goodput, bootstrap intervals, the
comparison of saved runs and the CI gate. Pure: nothing here touches the network."""
