"""The PPO trainer: ``RLTrainer(config=..., checkpoint_dir=...).train(resume_from_checkpoint=...)``."""

from verl.trainer.ppo_trainer import RLTrainer, TrainResult

__all__ = ["RLTrainer", "TrainResult"]
