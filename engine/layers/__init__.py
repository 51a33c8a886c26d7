"""Building blocks of the models; every sharded layer takes a `TPGroup` (tensor-parallel seam)."""
