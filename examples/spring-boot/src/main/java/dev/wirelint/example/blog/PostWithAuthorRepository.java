package dev.wirelint.example.blog;

import java.util.List;
import org.springframework.data.domain.Pageable;
import org.springframework.data.mongodb.repository.MongoRepository;

public interface PostWithAuthorRepository extends MongoRepository<PostWithAuthor, String> {
  /** A page of posts, each with its author (one query per post for it). */
  List<PostWithAuthor> findAllBy(Pageable page);
}
