"""A small controller-runtime-style framework on raw watches. It knows nothing of pools."""
