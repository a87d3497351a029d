"""Executing algorithms: the numpy reference executor (``reference``) today."""
