package dev.wirelint.example.blog;

import java.util.List;
import org.springframework.data.domain.Pageable;
import org.springframework.data.mongodb.repository.MongoRepository;

public interface PostRepository extends MongoRepository<Post, String> {
  /** A page of posts, without the count a Page would run. */
  List<Post> findAllBy(Pageable page);
}
