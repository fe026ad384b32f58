"""Speech to text: Whisper-class models served by Transcribe (mlx-audio's model classes)."""
