"""The operator's controllers: InferenceService, ModelPool and ModelRouter."""
